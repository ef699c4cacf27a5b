#pragma once
// `tutti data prepare`: a text corpus (corpus.hpp) into a dataset directory
// (dataset.hpp) a job trains on.
//
//   read -> normalise (normalize.hpp) -> drop empty and exact duplicates
//   (xxh64 of the normalised text) -> held-out or train, by a hash of the
//   document (so the split does not depend on input order or on the other
//   documents) -> chunks of about shard_bytes of text per split, in input
//   order -> each chunk tokenized on a worker thread (all cores), every
//   document followed by the tokenizer's end-of-document id (byte-level:
//   a blank line), and written as one shard.
//
// Output besides the shards and meta.json: index.json (per shard: split,
// documents, tokens, text bytes, where its first document came from),
// report.json (what prepare_report holds) and the tokenizer.model used.
//
// Resumable: progress.jsonl records each shard as it is written, with a
// hash of the chunk's text and of the settings; a later prepare of the
// same inputs and settings keeps every recorded shard whose file verifies
// and writes the rest, so an interrupted prepare ends with the same files as
// an uninterrupted one. meta.json is removed first and written last: a job
// never trains on a half-prepared directory.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/data/corpus.hpp"

namespace tutti::data {

struct prepare_options {
  std::vector<std::filesystem::path> inputs;
  std::filesystem::path out_dir;
  // A tokenizer.model or a directory holding one; empty: byte-level.
  std::filesystem::path tokenizer;
  corpus_options corpus;
  double val_fraction = 0.05;
  std::uint64_t shard_bytes = 16ull << 20; // of normalised text per shard
  std::uint64_t split_seed = 0;            // which documents are held out
  unsigned threads = 0;                    // tokenizing workers; 0 = all cores
  // Polled between chunks: true stops the prepare like an interruption
  // (no meta.json; the next prepare resumes). Empty: never.
  std::function<bool()> interrupted;
};

struct prepare_report {
  bool complete = false;       // false: interrupted
  std::uint64_t documents = 0; // read from the inputs
  std::uint64_t empty = 0;     // empty after normalisation, dropped
  std::uint64_t duplicates = 0;
  std::uint64_t train_documents = 0, val_documents = 0;
  std::uint64_t train_tokens = 0, val_tokens = 0;
  std::uint64_t input_bytes = 0; // read (uncompressed)
  std::uint64_t text_bytes = 0;  // normalised, kept
  std::uint32_t train_shards = 0, val_shards = 0;
  std::uint32_t shards_reused = 0; // kept from an earlier, interrupted run
  std::uint32_t vocab_size = 0;
  std::string tokenizer; // "bytes" or "sentencepiece"
  unsigned threads = 0;
  double seconds = 0;

  double bytes_per_token() const;
  double megabytes_per_second() const; // input text read per second
};

std::string report_to_json(const prepare_report& report);

// Fails naming the input file and offset of what is wrong (missing file,
// truncated .gz, bad JSON line, invalid UTF-8), or the output it could not
// write. An interruption is not a failure: complete is false.
expected<prepare_report> prepare_corpus(const prepare_options& options);

} // namespace tutti::data
