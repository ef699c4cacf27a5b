// The tokenizer shipped with a model: a tokenizer.model in the model
// directory is loaded with it; text prompts and stop sequences go through
// it, and completions come back as its text (pieces, U+2581 as a space); a
// broken or too large tokenizer.model is refused naming the file.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>

#include "serve_test_support.hpp"
#include "tutti/serve/completion_api.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

fs::path model_dir(const std::string& name, int vocab) {
  return write_random_export(
    scratch("serve_tokenizer") / name,
    serve_test_config(vocab, 32, 48, 1, 4, 2, 4, 2, 64), 3);
}

void train_into(const fs::path& dir, uint32_t vocab) {
  std::vector<std::string> lines;
  const char* words[] = {"the", "cat", "sat", "on",  "a",    "mat",
                         "and", "dog", "ran", "far", "away", "home"};
  uint64_t x = 7;
  for (int i = 0; i < 400; ++i) {
    std::string line;
    for (int k = 0; k < 8; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      line += (k ? " " : "") + std::string(words[(x >> 33) % 12]);
    }
    lines.push_back(line);
  }
  size_t i = 0;
  tokenizer::train_options o;
  o.vocab_size = vocab;
  o.threads = 1;
  auto trained = tokenizer::train(
    [&](std::string& out) {
      if (i == lines.size())
        return false;
      out = lines[i++];
      return true;
    },
    o, dir);
  INFO(trained.message());
  REQUIRE(trained.ok());
}

} // namespace

TEST_CASE("a model's tokenizer.model turns text prompts into its tokens",
          "[unit]") {
  const auto dir = model_dir("with_tokenizer", 512);
  train_into(dir, 300); // byte fallback: 256 of them are bytes
  auto m = serve::load_model(dir);
  REQUIRE(m.ok());
  REQUIRE(m.value().text_tokenizer);
  const auto& tok = *m.value().text_tokenizer;
  CHECK(tok.kind() == "sentencepiece");

  const std::string text = "the cat sat on a mat";
  auto ids = tok.encode(text);
  REQUIRE(ids.ok());
  CHECK(ids.value().size() < text.size()); // pieces, not bytes
  auto p = serve::parse_completion(
    R"({"prompt": "the cat sat on a mat", "max_tokens": 4, "stop": " dog"})",
    m.value(), 1);
  REQUIRE(p.http_status == 0);
  CHECK(p.req->prompt == ids.value());
  auto stop = tok.encode(" dog");
  REQUIRE(stop.ok());
  CHECK(p.req->stop.at(0) == stop.value());

  // The completion's text is the pieces' text.
  serve::completion_result r;
  for (int32_t id : ids.value())
    r.tokens.push_back({id, -1.0f, {}});
  r.finish = serve::finish_reason::length;
  auto body = nlohmann::json::parse(
    serve::completion_body("c", "m", 0, r, {}, &m.value()));
  CHECK(body["choices"][0]["text"] == " " + text);
  CHECK(serve::token_text(&m.value(), tok.eos_id()).empty());
}

TEST_CASE("a model without tokenizer.model keeps byte-level text", "[unit]") {
  auto m = serve::load_model(model_dir("bytes", 256));
  REQUIRE(m.ok());
  CHECK_FALSE(m.value().text_tokenizer);
  auto p = serve::parse_completion(R"({"prompt": "Hi", "max_tokens": 1})",
                                   m.value(), 1);
  REQUIRE(p.http_status == 0);
  CHECK(p.req->prompt == std::vector<int32_t>{'H', 'i'});
}

TEST_CASE("a broken or too large tokenizer.model is refused naming the file",
          "[unit]") {
  const auto broken = model_dir("broken", 512);
  std::ofstream(broken / "tokenizer.model") << "not a sentencepiece model";
  auto m = serve::load_model(broken);
  REQUIRE_FALSE(m.ok());
  CHECK(m.message().find("tokenizer.model") != std::string::npos);

  const auto small = model_dir("small_vocab", 256);
  train_into(small, 300);
  auto s = serve::load_model(small);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("larger than the model's 256") != std::string::npos);
}
