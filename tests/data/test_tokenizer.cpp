// tokenizer/: SentencePiece training, encode/decode round trips on
// multi-byte UTF-8, loading from a directory, byte-level default.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "tutti/store/atomic_file.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

#include "data_test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti;
using namespace tutti::testing;

namespace {

// Lines in Latin, accented Latin, Greek, Cyrillic, CJK and emoji.
std::vector<std::string> corpus_lines() {
  const std::vector<std::string> words = {
    "the", "quick", "brown",  "fox",      "jumps",    "over",  "lazy",
    "dog", "café",  "naïve",  "über",     "straße",   "λόγος", "κόσμος",
    "мир", "слово", "日本語", "テキスト", "中文字符", "🙂",  "🚀"};
  std::vector<std::string> lines;
  std::uint64_t x = 12345;
  for (int i = 0; i < 3000; ++i) {
    std::string line;
    const int n = 4 + i % 9;
    for (int k = 0; k < n; ++k) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      line += (k ? " " : "") + words[(x >> 33) % words.size()];
    }
    lines.push_back(line);
  }
  return lines;
}

tokenizer::sentence_source from(const std::vector<std::string>& lines) {
  auto i = std::make_shared<std::size_t>(0);
  return [&lines, i](std::string& out) {
    if (*i == lines.size())
      return false;
    out = lines[(*i)++];
    return true;
  };
}

} // namespace

TEST_CASE("a trained SentencePiece tokenizer round-trips multi-byte UTF-8",
          "[tokenizer]") {
  const auto lines = corpus_lines();
  for (auto type :
       {tokenizer::model_type::unigram, tokenizer::model_type::bpe}) {
    temp_dir dir(type == tokenizer::model_type::bpe ? "bpe" : "unigram");
    tokenizer::train_options o;
    o.vocab_size = 400;
    o.type = type;
    o.threads = 1;
    REQUIRE(tokenizer::train(from(lines), o, dir.path).ok());
    REQUIRE(fs::exists(dir.path / "tokenizer.model"));

    auto tok = tokenizer::tokenizer::load(dir.path); // from the directory
    REQUIRE(tok.ok());
    CHECK(tok.value().kind() == "sentencepiece");
    CHECK(tok.value().vocab_size() <= 400);
    CHECK(tok.value().eos_id() == 2);

    // Seen text, unseen characters (byte fallback), newlines and indentation.
    for (const std::string& text :
         {lines[7],
          std::string("naïve café λόγος 日本語 🙂 over the dog"),
          std::string("Ünïcödé ☃ not in training: 한국어 ✓"),
          std::string("def f(x):\n    return x  # two spaces\n\nend")}) {
      auto ids = tok.value().encode(text);
      REQUIRE(ids.ok());
      CHECK_FALSE(ids.value().empty());
      for (auto id : ids.value())
        CHECK(id != tok.value().unk_id());
      auto back = tok.value().decode(ids.value());
      REQUIRE(back.ok());
      CHECK(back.value() == text);
    }
    // Training compresses the text it saw: fewer tokens than bytes.
    auto ids = tok.value().encode(lines[7]);
    CHECK(ids.value().size() * 2 < lines[7].size());

    // Decoding an id outside the vocabulary names it.
    const std::int32_t bad[] = {5, 100000};
    CHECK_THAT(tok.value().decode(bad).message(), Catch::Contains("100000"));
  }
}

TEST_CASE("byte-level stays the default", "[tokenizer]") {
  temp_dir dir("bytes");
  auto tok = tokenizer::tokenizer::load(dir.path); // no tokenizer.model
  REQUIRE(tok.ok());
  CHECK(tok.value().kind() == "bytes");
  CHECK(tok.value().vocab_size() == 256);
  CHECK(tok.value().eos_id() == -1);
  const std::string text = "héllo 🙂";
  auto ids = tok.value().encode(text);
  REQUIRE(ids.ok());
  CHECK(ids.value().size() == text.size());
  CHECK(tok.value().decode(ids.value()).value() == text);
}

TEST_CASE("a file that is not a SentencePiece model is refused by name",
          "[tokenizer]") {
  temp_dir dir("bad");
  REQUIRE(store::write_file_atomic(dir.path / "tokenizer.model",
                                   std::string_view("not a model")));
  auto tok = tokenizer::tokenizer::load(dir.path);
  REQUIRE_FALSE(tok.ok());
  CHECK_THAT(tok.message(), Catch::Contains("tokenizer.model"));
  CHECK(tokenizer::parse_model_type("wordpiece").message().find("unigram")
        != std::string::npos);
}
