#pragma once
// Streaming documents out of a text corpus: files and directories (walked
// recursively, in sorted path order), each plain text or JSON lines
// (`.jsonl`, `.json`), optionally gzip-compressed (`.gz`, read through
// zlib as it streams). One document is
//   plain text   the whole file, or, with a delimiter line, the text
//                between lines equal to it (fortune files use "%");
//   JSON lines   one line's string field `text_field`.
// Every document carries its file and the byte offset it starts at (in the
// uncompressed stream), so a refusal can name where the input is wrong.
// Nothing here normalises or checks encodings: see normalize.hpp.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::data {

struct corpus_options {
  std::string text_field = "text"; // JSON lines
  std::string doc_delimiter;       // plain text; empty: one file, one doc
};

struct document {
  std::string text;
  std::filesystem::path source;
  std::uint64_t offset = 0; // of the document's first byte in source
};

class corpus_reader {
public:
  corpus_reader();
  corpus_reader(corpus_reader&&) noexcept;
  corpus_reader& operator=(corpus_reader&&) noexcept;
  ~corpus_reader();

  // Fails naming the first input that does not exist, and when the inputs
  // hold no file at all.
  static expected<corpus_reader> open(
    const std::vector<std::filesystem::path>& inputs, corpus_options options);

  const std::vector<std::filesystem::path>& files() const;
  // Total size on disk of files(), compressed where they are.
  std::uint64_t disk_bytes() const;

  // The next document into `out`: true, or false at the end. A read error,
  // a truncated .gz or a bad JSON line fails naming file and offset.
  expected<bool> next(document& out);

private:
  struct state;
  std::unique_ptr<state> state_;
};

} // namespace tutti::data
