#pragma once
// A Hugging Face `tokenizer.json` of BPE type with byte-level
// pre-tokenization, as GPT-2 and Llama 3 ship theirs: added tokens split
// out first, then the pre-tokenizer's regular expressions (Oniguruma, the
// engine the `tokenizers` library uses), bytes mapped to printable
// characters, and merges applied by rank. Other models (WordPiece, Unigram)
// and normalizers are refused by name when loading.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::tokenizer::detail {

class hf_bpe {
public:
  // `json` is the file's text; `name` names it in messages.
  static expected<std::shared_ptr<const hf_bpe>> parse(std::string json,
                                                       std::string_view name);
  ~hf_bpe();

  std::uint32_t vocab_size() const { return vocab_size_; }
  std::int32_t eos_id() const { return eos_id_; }
  std::int32_t bos_id() const { return bos_id_; }
  std::int32_t unk_id() const { return unk_id_; }
  std::string piece(std::int32_t id) const;
  const std::string& text() const { return text_; }

  expected<std::vector<std::int32_t>> encode(std::string_view text) const;
  // Ids are checked by the caller.
  std::string decode(std::span<const std::int32_t> ids) const;

private:
  struct split_rule; // a compiled pre-tokenizer expression
  hf_bpe() = default;
  status encode_plain(std::string_view text,
                      std::vector<std::int32_t>& out) const;
  status encode_word(std::string_view mapped,
                     std::vector<std::int32_t>& out) const;

  std::string text_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::vector<std::string> pieces_; // by id
  std::vector<bool> added_;         // by id: emitted as is by decode
  std::unordered_map<std::string, std::int32_t> merge_rank_; // "a\0b"
  std::vector<std::pair<std::string, std::int32_t>> added_tokens_;
  std::vector<std::unique_ptr<split_rule>> splits_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  std::uint32_t vocab_size_ = 0;
  std::int32_t eos_id_ = -1, bos_id_ = -1, unk_id_ = -1;
};

} // namespace tutti::tokenizer::detail
