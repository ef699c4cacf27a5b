// data/ prepare: corpora (files, directories, .gz, JSON lines) into
// datasets; determinism, resume after an interruption, duplicates,
// corrupt inputs named by file and offset.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <algorithm>
#include <map>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tutti/data/dataset.hpp"
#include "tutti/data/normalize.hpp"
#include "tutti/data/prepare.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

#include "data_test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti;
using namespace tutti::data;
using namespace tutti::testing;

namespace {

void spit_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()))
          == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::string doc_text(int i) {
  std::string s = "Document " + std::to_string(i) + ": ";
  for (int k = 0; k < 20 + i % 7; ++k)
    s += "wörd" + std::to_string((i * 31 + k) % 97) + " ";
  return s + "\nsecond line of " + std::to_string(i) + " — ok.\n";
}

// A corpus of every input kind: a directory of text files, a fortune-style
// file is not used here (one document per file), a .jsonl and a .jsonl.gz.
std::vector<fs::path> make_corpus(const fs::path& root) {
  for (int i = 0; i < 60; ++i)
    spit(root / "docs" / ("d" + std::to_string(100 + i) + ".txt"), doc_text(i));
  std::string jsonl, jsonl_gz;
  for (int i = 60; i < 120; ++i)
    jsonl += nlohmann::json{{"text", doc_text(i)}, {"id", i}}.dump() + "\n";
  for (int i = 120; i < 180; ++i)
    jsonl_gz += nlohmann::json{{"text", doc_text(i)}}.dump() + "\n";
  spit(root / "more.jsonl", jsonl);
  spit_gz(root / "most.jsonl.gz", jsonl_gz);
  return {root / "docs", root / "more.jsonl", root / "most.jsonl.gz"};
}

// Every file of a directory but the timing report, by name.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "report.json")
      out[e.path().filename().string()] = store::read_file(e.path()).value();
  return out;
}

prepare_options options_for(const std::vector<fs::path>& inputs,
                            const fs::path& out) {
  prepare_options o;
  o.inputs = inputs;
  o.out_dir = out;
  o.val_fraction = 0.2;
  o.shard_bytes = 2000; // many shards from a small corpus
  o.threads = 2;
  return o;
}

} // namespace

TEST_CASE("normalisation: line ends, control characters, blank lines",
          "[prepare]") {
  CHECK(normalize_document("  a\r\nb \t\r\rc\x01\x7f\n\n\n\n  d  \n\n").value()
        == "a\nb\n\nc\n\n  d");
  CHECK(normalize_document("\xc3\xa9\xf0\x9f\x99\x82").value()
        == "\xc3\xa9\xf0\x9f\x99\x82");
  CHECK(first_invalid_utf8("ok\xc3\x28") == 2);
  CHECK(first_invalid_utf8("\xed\xa0\x80") == 0); // a surrogate
  CHECK(first_invalid_utf8("\xc0\xaf") == 0);     // overlong
  CHECK(first_invalid_utf8("\xe2\x82") == 0);     // truncated
}

TEST_CASE("prepare twice gives identical shards", "[prepare]") {
  temp_dir dir("twice");
  const auto inputs = make_corpus(dir.path / "in");
  auto a = prepare_corpus(options_for(inputs, dir.path / "a"));
  REQUIRE(a.ok());
  auto b = prepare_corpus(options_for(inputs, dir.path / "b"));
  REQUIRE(b.ok());
  CHECK(a.value().complete);
  CHECK(a.value().documents == 180);
  CHECK(a.value().train_documents + a.value().val_documents == 180);
  CHECK(a.value().val_documents > 10);
  CHECK(a.value().train_shards > 3);
  const auto fa = files_of(dir.path / "a"), fb = files_of(dir.path / "b");
  CHECK(fa == fb);
  CHECK(fa.count("meta.json"));
  CHECK(fa.count("index.json"));
  CHECK_FALSE(fa.count("progress.jsonl"));

  // The shards hold every document's bytes, each followed by a blank line
  // (byte-level has no end-of-document id); meta and index agree.
  auto meta = read_meta(dir.path / "a");
  REQUIRE(meta.ok());
  CHECK(meta.value().vocab_size == 256);
  CHECK(meta.value().source == "bytes");
  CHECK(meta.value().train_tokens == a.value().train_tokens);
  auto val = load_split(dir.path / "a", "val");
  REQUIRE(val.ok());
  const std::string held_out(val.value()[0].begin(), val.value()[0].end());
  CHECK(held_out.find("second line of") != std::string::npos);
  auto index = nlohmann::json::parse(fa.at("index.json"));
  CHECK(index["shards"].size()
        == meta.value().train_shards + meta.value().val_shards);
  CHECK(index["shards"][0]["first_document"]["source"].get<std::string>().find(
          "docs/d10")
        != std::string::npos);

  // Input order does not move a document between train and held-out.
  auto reversed = options_for({inputs[2], inputs[1], inputs[0]},
                              dir.path / "c");
  auto c = prepare_corpus(reversed);
  REQUIRE(c.ok());
  CHECK(c.value().val_documents == a.value().val_documents);
  CHECK(c.value().val_tokens == a.value().val_tokens);
}

TEST_CASE("an interrupted prepare resumes to identical shards", "[prepare]") {
  temp_dir dir("resume");
  const auto inputs = make_corpus(dir.path / "in");
  REQUIRE(prepare_corpus(options_for(inputs, dir.path / "whole")).ok());

  auto o = options_for(inputs, dir.path / "cut");
  int chunks = 0;
  o.interrupted = [&] { return ++chunks > 4; };
  auto first = prepare_corpus(o);
  REQUIRE(first.ok());
  CHECK_FALSE(first.value().complete);
  CHECK_FALSE(fs::exists(dir.path / "cut" / "meta.json"));
  CHECK(fs::exists(dir.path / "cut" / "progress.jsonl"));
  // A torn record (the run died while appending) is redone, not trusted.
  {
    std::FILE* f = std::fopen((dir.path / "cut" / "progress.jsonl").c_str(),
                              "ab");
    std::fputs("{\"split\":\"train\",\"ind", f);
    std::fclose(f);
  }

  o.interrupted = nullptr;
  auto second = prepare_corpus(o);
  REQUIRE(second.ok());
  CHECK(second.value().complete);
  CHECK(second.value().shards_reused == 4);
  CHECK(files_of(dir.path / "cut") == files_of(dir.path / "whole"));
}

TEST_CASE("duplicates are removed and counted", "[prepare]") {
  temp_dir dir("dups");
  // The same document three times: once as is, once with CR LF and trailing
  // spaces (equal after normalisation), once in JSON lines; plus an empty.
  spit(dir.path / "in" / "a.txt", doc_text(1));
  std::string crlf;
  for (char c : doc_text(1))
    crlf += c == '\n' ? std::string(" \r\n") : std::string(1, c);
  spit(dir.path / "in" / "b.txt", crlf);
  spit(dir.path / "in" / "c.jsonl",
       nlohmann::json{{"text", doc_text(1)}}.dump() + "\n"
         + nlohmann::json{{"text", doc_text(2)}}.dump() + "\n"
         + nlohmann::json{{"text", " \n\t\n"}}.dump() + "\n");
  auto o = options_for({dir.path / "in"}, dir.path / "out");
  o.val_fraction = 0;
  auto r = prepare_corpus(o);
  REQUIRE(r.ok());
  CHECK(r.value().documents == 5);
  CHECK(r.value().duplicates == 2);
  CHECK(r.value().empty == 1);
  CHECK(r.value().train_documents == 2);
  auto report = nlohmann::json::parse(
    store::read_file(dir.path / "out" / "report.json").value());
  CHECK(report["duplicates_dropped"] == 2);
  CHECK(report["bytes_per_token"].get<double>() > 0.9);
}

TEST_CASE("corrupt inputs are named with file and offset", "[prepare]") {
  temp_dir dir("corrupt");
  auto refused = [&](const std::vector<fs::path>& inputs) {
    auto r = prepare_corpus(options_for(inputs, dir.path / "out"));
    REQUIRE_FALSE(r.ok());
    CHECK_FALSE(fs::exists(dir.path / "out" / "meta.json"));
    return r.message();
  };
  spit(dir.path / "good.txt", doc_text(3));

  // Invalid UTF-8 at byte 9 of the second document of a delimited file.
  spit(dir.path / "fortunes", "first\n%\nsecond \xff\n%\n");
  {
    auto o = options_for({dir.path / "fortunes"}, dir.path / "out");
    o.corpus.doc_delimiter = "%";
    auto r = prepare_corpus(o);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(), Catch::Contains("fortunes")
                              && Catch::Contains("offset 8")
                              && Catch::Contains("invalid UTF-8 at byte 7"));
  }

  // A truncated .gz.
  std::string big;
  for (int i = 0; i < 400; ++i)
    big += nlohmann::json{{"text", doc_text(i)}}.dump() + "\n";
  spit_gz(dir.path / "t.jsonl.gz", big);
  const auto gz = store::read_file(dir.path / "t.jsonl.gz").value();
  spit(dir.path / "t.jsonl.gz", gz.substr(0, gz.size() / 2));
  CHECK_THAT(refused({dir.path / "good.txt", dir.path / "t.jsonl.gz"}),
             Catch::Contains("t.jsonl.gz") && Catch::Contains("truncated gzip")
               && Catch::Contains("offset"));

  // Not gzip at all, though named .gz.
  spit(dir.path / "plain.gz", "hello");
  CHECK_THAT(refused({dir.path / "plain.gz"}),
             Catch::Contains("plain.gz") && Catch::Contains("not gzip"));

  // A bad JSON line and a line without the text field.
  spit(dir.path / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \n");
  CHECK_THAT(refused({dir.path / "bad.jsonl"}),
             Catch::Contains("bad.jsonl: line 2 (offset 15)")
               && Catch::Contains("not valid JSON"));
  spit(dir.path / "field.jsonl", "{\"body\": \"ok\"}\n");
  CHECK_THAT(refused({dir.path / "field.jsonl"}),
             Catch::Contains("line 1") && Catch::Contains("\"text\""));

  // A missing input.
  CHECK_THAT(refused({dir.path / "good.txt", dir.path / "nope.txt"}),
             Catch::Contains("nope.txt"));
}

TEST_CASE("prepare with a SentencePiece tokenizer ends documents with EOS",
          "[prepare]") {
  temp_dir dir("spm");
  const auto inputs = make_corpus(dir.path / "in");
  std::vector<std::string> lines;
  for (int i = 0; i < 400; ++i)
    lines.push_back(doc_text(i));
  std::size_t next = 0;
  tokenizer::train_options t;
  t.vocab_size = 320;
  t.threads = 1;
  REQUIRE(tokenizer::train(
            [&](std::string& s) {
              if (next == lines.size())
                return false;
              s = lines[next++];
              return true;
            },
            t, dir.path / "tok")
            .ok());
  auto o = options_for(inputs, dir.path / "out");
  o.tokenizer = dir.path / "tok";
  auto r = prepare_corpus(o);
  REQUIRE(r.ok());
  CHECK(r.value().tokenizer == "sentencepiece");
  CHECK(r.value().bytes_per_token() > 1.5);
  CHECK(fs::exists(dir.path / "out" / "tokenizer.model"));
  auto train = load_split(dir.path / "out", "train");
  REQUIRE(train.ok());
  std::uint64_t eos = 0;
  for (const auto& s : train.value())
    for (auto id : s)
      eos += id == 2;
  CHECK(eos == r.value().train_documents);
  // The copy of the tokenizer decodes the shards back to the documents.
  auto tok = tokenizer::tokenizer::load(dir.path / "out");
  REQUIRE(tok.ok());
  const auto& first = train.value()[0];
  const auto end = std::find(first.begin(), first.end(), 2);
  auto text = tok.value().decode(
    {first.data(), std::size_t(end - first.begin())});
  REQUIRE(text.ok());
  bool found = false;
  for (int i = 0; i < 180; ++i)
    found = found || text.value() == normalize_document(doc_text(i)).value();
  CHECK(found);
}
