#pragma once
// Text <-> token ids. Two kinds:
//   bytes          one token per byte, vocabulary 256, no end-of-document
//                  token (the default, for tiny tests and byte-level models);
//   sentencepiece  a trained SentencePiece model (unigram or BPE), read from
//                  `tokenizer.model`; ids 0, 1, 2 are <unk>, <s>, </s>;
//   huggingface-bpe  a Hugging Face `tokenizer.json` of byte-level BPE type
//                  (GPT-2, Llama 3): vocabulary, merges, added tokens and
//                  the pre-tokenizer's expressions.
// A loaded tokenizer is immutable: encode and decode may be called from
// several threads at once.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::tokenizer {

// The file name a tokenizer is saved as and looked for in a directory.
inline constexpr std::string_view model_file_name = "tokenizer.model";
inline constexpr std::string_view hf_json_file_name = "tokenizer.json";

class tokenizer {
public:
  tokenizer(); // byte-level

  static tokenizer bytes() { return {}; }
  // `path` is a tokenizer.model or tokenizer.json file, or a directory: its
  // tokenizer.model if there is one, else its tokenizer.json, otherwise
  // byte-level.
  static expected<tokenizer> load(const std::filesystem::path& path);
  // A SentencePiece model from its serialized bytes; `name` for messages.
  static expected<tokenizer> from_model_bytes(std::string bytes,
                                              std::string_view name);

  // A Hugging Face tokenizer.json's text; `name` for messages. Anything but
  // byte-level BPE is refused naming what is not supported.
  static expected<tokenizer> from_hf_json(std::string json,
                                          std::string_view name);

  std::string kind() const; // "bytes", "sentencepiece" or "huggingface-bpe"
  std::uint32_t vocab_size() const;
  // End-of-document id, or -1 when the vocabulary has none (bytes).
  std::int32_t eos_id() const;
  std::int32_t bos_id() const; // -1 when none
  std::int32_t unk_id() const; // -1 when none
  // The piece an id stands for ("\xe2\x96\x81the", "</s>", "<0x41>" ...).
  std::string piece(std::int32_t id) const;

  expected<std::vector<std::int32_t>> encode(std::string_view text) const;
  // Ids outside the vocabulary are an error naming the first one.
  expected<std::string> decode(std::span<const std::int32_t> ids) const;

  // The SentencePiece model's bytes or the tokenizer.json's text (empty for
  // bytes), to copy next to a dataset or an export.
  const std::string& model_bytes() const;
  // Writes dir/tokenizer.model or dir/tokenizer.json (nothing for bytes).
  status save(const std::filesystem::path& dir) const;

private:
  struct impl;
  std::shared_ptr<const impl> impl_;
};

// Whether `dir` holds a tokenizer.model or a tokenizer.json.
bool holds_tokenizer(const std::filesystem::path& dir);

enum class model_type { unigram, bpe };

struct train_options {
  std::uint32_t vocab_size = 8000;
  model_type type = model_type::unigram;
  double character_coverage = 0.9995;
  // Sentences (lines) sampled for training; 0 = all.
  std::uint64_t max_sentences = 2'000'000;
  std::uint32_t threads = 0; // 0 = all cores
  std::uint64_t seed = 0;
};

// Calls next(sentence) until it returns false; each sentence is one line of
// text. On success dir/tokenizer.model exists and loads.
using sentence_source = std::function<bool(std::string&)>;
status train(const sentence_source& next, const train_options& options,
             const std::filesystem::path& dir);

expected<model_type> parse_model_type(std::string_view name);

} // namespace tutti::tokenizer
