// tokenizer/: a Hugging Face tokenizer.json of byte-level BPE type, in the
// shapes GPT-2 (ByteLevel pre-tokenizer, "a b" merges) and Llama 3 (a Split
// expression then ByteLevel without its own, [a, b] merges, ignore_merges)
// ship: known ids, round trips on multi-byte UTF-8, added tokens, loading
// order in a directory, refusals of what is not supported.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tutti/store/atomic_file.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

#include "data_test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::ordered_json;

namespace {

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80)
    return std::string(1, static_cast<char>(cp));
  s += static_cast<char>(0xC0 | (cp >> 6));
  s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// GPT-2's bytes_to_unicode, written out from its definition: printable
// bytes stand for themselves, the others take code points 256, 257, ...
std::string byte_char(unsigned b) {
  const auto printable = [](unsigned c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC)
           || (c >= 0xAE && c <= 0xFF);
  };
  if (printable(b))
    return utf8(b);
  std::uint32_t n = 256;
  for (unsigned c = 0; c < b; ++c)
    n += printable(c) ? 0 : 1;
  return utf8(n);
}

// The merges of both fixtures: the ids of the words they build are known.
const std::vector<std::pair<std::string, std::string>> merges = {
  {"t", "h"}, {"th", "e"},  {"Ġ", "the"}, {"Ġ", "w"},
  {"o", "r"}, {"Ġw", "or"}, {"l", "d"},   {"Ġwor", "ld"},
  {"H", "e"}, {"l", "l"},   {"He", "ll"}, {"Hell", "o"},
  {"3", "a"}, {"3", "4"},   {"1", "2"},   {"4", "5"}};
constexpr std::int32_t hello = 256 + 11, space_world = 256 + 7,
                       space_the = 256 + 2, end_of_text = 256 + 16;

json vocab() {
  json v = json::object();
  for (unsigned b = 0; b < 256; ++b)
    v[byte_char(b)] = b; // ids 0-255: the bytes, in byte order
  std::int32_t id = 256;
  for (const auto& [a, b] : merges)
    v[a + b] = id++;
  return v;
}

json added(std::int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content}, {"single_word", false},
          {"lstrip", false}, {"rstrip", false},    {"normalized", false},
          {"special", true}};
}

std::string gpt2_shape() {
  json m = json::array();
  for (const auto& [a, b] : merges)
    m.push_back(a + " " + b);
  json j = {
    {"version", "1.0"},
    {"truncation", nullptr},
    {"padding", nullptr},
    {"added_tokens", json::array({added(end_of_text, "<|endoftext|>")})},
    {"normalizer", nullptr},
    {"pre_tokenizer",
     {{"type", "ByteLevel"},
      {"add_prefix_space", false},
      {"trim_offsets", true},
      {"use_regex", true}}},
    {"post_processor", nullptr},
    {"decoder", {{"type", "ByteLevel"}}},
    {"model",
     {{"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", nullptr},
      {"continuing_subword_prefix", ""},
      {"end_of_word_suffix", ""},
      {"fuse_unk", false},
      {"byte_fallback", false},
      {"vocab", vocab()},
      {"merges", m}}}};
  return j.dump();
}

std::string llama3_shape() {
  json m = json::array();
  for (const auto& [a, b] : merges)
    m.push_back(json::array({a, b}));
  const std::string pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json j = {{"version", "1.0"},
            {"added_tokens",
             json::array({added(end_of_text, "<|end_of_text|>"),
                          added(end_of_text + 1, "<|begin_of_text|>")})},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers", json::array({{{"type", "Split"},
                                              {"pattern", {{"Regex", pattern}}},
                                              {"behavior", "Isolated"},
                                              {"invert", false}},
                                             {{"type", "ByteLevel"},
                                              {"add_prefix_space", false},
                                              {"trim_offsets", true},
                                              {"use_regex", false}}})}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", true},
              {"vocab", vocab()},
              {"merges", m}}}};
  return j.dump();
}

std::vector<std::int32_t> ids(const tokenizer::tokenizer& t,
                              std::string_view text) {
  auto e = t.encode(text);
  REQUIRE(e.ok());
  return e.value();
}

const std::string multilingual = "café naïve über straße λόγος мир 日本語 "
                                 "テキスト 🙂🚀\n\ttabs  and  "
                                 "spaces, it's 12345 they'll\r\n";

} // namespace

TEST_CASE("GPT-2's byte map is the one tokenizer.json pieces are written in",
          "[tokenizer]") {
  CHECK(byte_char(' ') == "Ġ");  // U+0120
  CHECK(byte_char('\n') == "Ċ"); // U+010A
  CHECK(byte_char('A') == "A");
}

TEST_CASE("a GPT-2-shaped tokenizer.json: known ids and UTF-8 round trips",
          "[tokenizer]") {
  auto t = tokenizer::tokenizer::from_hf_json(gpt2_shape(), "gpt2.json");
  REQUIRE(t.ok());
  const auto& tok = t.value();
  CHECK(tok.kind() == "huggingface-bpe");
  CHECK(tok.vocab_size() == 256 + merges.size() + 1);
  CHECK(tok.eos_id() == end_of_text);
  CHECK(tok.bos_id() == -1);
  CHECK(tok.piece(space_world) == "Ġworld");

  CHECK(ids(tok, "Hello world the")
        == std::vector<std::int32_t>{hello, space_world, space_the});
  // Added tokens are cut out of the raw text before pre-tokenizing.
  CHECK(ids(tok, "Hello<|endoftext|> the")
        == std::vector<std::int32_t>{hello, end_of_text, space_the});
  // Multi-byte characters without merges are their bytes.
  CHECK(ids(tok, "é") == std::vector<std::int32_t>{0xC3, 0xA9});
  // GPT-2's expression keeps digits and letters apart: "3 a" never merges.
  CHECK(ids(tok, "123abc")
        == std::vector<std::int32_t>{256 + 14, '3', 'a', 'b', 'c'});
  // The same digits under GPT-2's " ?\p{N}+": one piece, merged by rank.
  CHECK(ids(tok, "12345")
        == std::vector<std::int32_t>{256 + 14, 256 + 13, '5'});

  for (const auto& text : {multilingual, std::string("<|endoftext|>x"),
                           std::string(" leading and trailing  ")}) {
    const auto encoded = ids(tok, text);
    auto decoded = tok.decode(encoded);
    REQUIRE(decoded.ok());
    CHECK(decoded.value() == text);
  }
  // Out-of-vocabulary ids are refused, naming the id.
  const std::vector<std::int32_t> bad{1, 100000};
  auto refused = tok.decode(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message(), Catch::Contains("100000"));
}

TEST_CASE("a Llama-3-shaped tokenizer.json: Split expression, array merges",
          "[tokenizer]") {
  auto t = tokenizer::tokenizer::from_hf_json(llama3_shape(), "llama3.json");
  REQUIRE(t.ok());
  const auto& tok = t.value();
  CHECK(tok.eos_id() == end_of_text);
  CHECK(tok.bos_id() == end_of_text + 1);
  CHECK(ids(tok, "Hello world the")
        == std::vector<std::int32_t>{hello, space_world, space_the});
  // \p{N}{1,3}: "123" and "45" are separate pieces, so "3 4" cannot merge.
  CHECK(ids(tok, "12345")
        == std::vector<std::int32_t>{256 + 14, '3', 256 + 15});
  CHECK(ids(tok, "<|begin_of_text|>Hello")
        == std::vector<std::int32_t>{end_of_text + 1, hello});
  const auto encoded = ids(tok, multilingual);
  auto decoded = tok.decode(encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == multilingual);
}

TEST_CASE("a directory's tokenizer.json is loaded, after tokenizer.model",
          "[tokenizer]") {
  temp_dir dir("load");
  REQUIRE(store::write_file_atomic(dir.path / "tokenizer.json", gpt2_shape()));
  CHECK(tokenizer::holds_tokenizer(dir.path));
  auto tok = tokenizer::tokenizer::load(dir.path);
  REQUIRE(tok.ok());
  CHECK(tok.value().kind() == "huggingface-bpe");

  // save() writes tokenizer.json, which loads to the same encoder.
  temp_dir copy("copy");
  REQUIRE(tok.value().save(copy.path));
  auto again = tokenizer::tokenizer::load(copy.path / "tokenizer.json");
  REQUIRE(again.ok());
  CHECK(ids(again.value(), multilingual) == ids(tok.value(), multilingual));

  // With a tokenizer.model beside it, the .model is read first (this one is
  // not a SentencePiece model, so the load fails naming it).
  REQUIRE(store::write_file_atomic(dir.path / "tokenizer.model", "junk"));
  auto first = tokenizer::tokenizer::load(dir.path);
  REQUIRE_FALSE(first.ok());
  CHECK_THAT(first.error().message(), Catch::Contains("tokenizer.model"));
}

TEST_CASE("tokenizer.json kinds other than byte-level BPE are refused by name",
          "[tokenizer]") {
  auto j = json::parse(gpt2_shape());
  j["model"]["type"] = "WordPiece";
  auto wordpiece = tokenizer::tokenizer::from_hf_json(j.dump(), "wp.json");
  REQUIRE_FALSE(wordpiece.ok());
  CHECK_THAT(wordpiece.error().message(), Catch::Contains("WordPiece"));

  j = json::parse(gpt2_shape());
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  auto metaspace = tokenizer::tokenizer::from_hf_json(j.dump(), "ms.json");
  REQUIRE_FALSE(metaspace.ok());
  CHECK_THAT(metaspace.error().message(), Catch::Contains("Metaspace"));

  auto garbage = tokenizer::tokenizer::from_hf_json("{not json", "bad.json");
  REQUIRE_FALSE(garbage.ok());
  CHECK_THAT(garbage.error().message(), Catch::Contains("bad.json"));
}
