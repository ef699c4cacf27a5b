// A chat request against a model directory: tokenizer_config.json's
// chat_template and eos_token loaded with the model, messages rendered to
// the prompt and stopped at the end of the turn; a model without a
// template, bad messages and a template's raise_exception refused in one
// line naming the field; a malformed tokenizer_config.json refused when
// loading.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "serve_test_support.hpp"
#include "tutti/serve/completion_api.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

fs::path model_dir(const std::string& name) {
  return write_random_export(scratch("serve_chat_request") / name,
                             serve_test_config(256, 32, 48, 1, 4, 2, 4, 2, 256),
                             3);
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_config(const fs::path& dir, const nlohmann::json& j) {
  std::ofstream(dir / "tokenizer_config.json") << j.dump();
}

std::vector<int32_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

} // namespace

TEST_CASE("a chat request renders the model's template and stops at its "
          "end of turn",
          "[unit]") {
  const auto dir = model_dir("qwen");
  const auto qwen = read(source_dir()
                         + "/tests/serve/chat_templates/"
                           "qwen2.5.jinja");
  write_config(dir, {{"chat_template", qwen},
                     {"eos_token", {{"content", "<|endoftext|>"}}},
                     {"bos_token", nullptr}});
  auto m = serve::load_model(dir);
  INFO(m.message());
  REQUIRE(m.ok());
  CHECK(m.value().chat_template == qwen);
  CHECK(m.value().eos_token == "<|endoftext|>");

  auto p = serve::parse_chat(
    R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
        "logprobs": true, "top_logprobs": 2})",
    m.value(), 1);
  INFO(p.message);
  REQUIRE(p.http_status == 0);
  CHECK(p.options.chat);
  CHECK(p.options.logprobs);
  CHECK(p.req->sampling.logprobs == 2);
  CHECK(p.req->max_tokens == 3);
  CHECK(p.req->prompt
        == bytes("<|im_start|>system\nYou are Qwen, created by Alibaba "
                 "Cloud. You are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  CHECK(p.req->stop
        == std::vector<std::vector<int32_t>>{bytes("<|endoftext|>"),
                                             bytes("<|im_end|>")});
  // No max_tokens: as many as the service allows.
  p = serve::parse_chat(R"({"messages": [{"role": "user", "content": "Hi"}]})",
                        m.value(), 1);
  REQUIRE(p.http_status == 0);
  CHECK(p.req->max_tokens == 0);

  const std::vector<std::pair<std::string, std::string>> bad = {
    {R"({})", "messages"},
    {R"({"messages": {"role": "user"}})", "messages"},
    {R"({"messages": []})", "messages"},
    {R"({"messages": [7]})", "messages[0]"},
    {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
    {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
    {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})",
     "logprobs"},
    {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
     "top_logprobs"},
  };
  for (const auto& [body, param] : bad) {
    INFO(body);
    const auto r = serve::parse_chat(body, m.value(), 1);
    CHECK(r.http_status == 400);
    CHECK(r.param == param);
  }
}

TEST_CASE("chat is refused without a template and where it raises", "[unit]") {
  const auto plain = model_dir("plain");
  auto m = serve::load_model(plain);
  REQUIRE(m.ok());
  const std::string hi = R"({"messages": [{"role": "user", "content": "Hi"}]})";
  auto p = serve::parse_chat(hi, m.value(), 1);
  CHECK(p.http_status == 400);
  CHECK(p.message
        == "the model 'plain' has no chat_template (tokenizer_config.json "
           "in its directory); use /v1/completions");

  const auto mixtral = model_dir("mixtral");
  write_config(mixtral, {{"chat_template", read(source_dir()
                                                + "/tests/serve/chat_templates/"
                                                  "mixtral.jinja")},
                         {"bos_token", "<s>"},
                         {"eos_token", "</s>"}});
  m = serve::load_model(mixtral);
  REQUIRE(m.ok());
  p = serve::parse_chat(
    R"({"messages": [{"role": "assistant", "content": "Hi"}]})", m.value(), 1);
  CHECK(p.http_status == 400);
  CHECK(p.param == "messages");
  CHECK(p.message
        == "Conversation roles must alternate "
           "user/assistant/user/assistant/...");
  p = serve::parse_chat(hi, m.value(), 1);
  REQUIRE(p.http_status == 0);
  CHECK(p.req->prompt == bytes("<s>[INST] Hi [/INST]"));

  write_config(mixtral, {{"chat_template", 5}});
  m = serve::load_model(mixtral);
  REQUIRE_FALSE(m.ok());
  CHECK(m.message()
        == (mixtral / "tokenizer_config.json").string()
             + ": chat_template must be a string or a list");
}
