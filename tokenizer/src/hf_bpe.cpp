#include "hf_bpe.hpp"

#include <oniguruma.h>

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>

#include <nlohmann/json.hpp>

namespace tutti::tokenizer::detail {

namespace {

using json = nlohmann::json;

// GPT-2's pre-tokenizer, which `ByteLevel` applies when `use_regex` is on.
constexpr std::string_view gpt2_pattern =
  R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Length of the UTF-8 sequence starting with byte `lead` (1 for a stray
// continuation byte, so a walk always advances).
std::size_t utf8_length(unsigned char lead) {
  if (lead >= 0xF0)
    return 4;
  if (lead >= 0xE0)
    return 3;
  if (lead >= 0xC0)
    return 2;
  return 1;
}

// GPT-2's bytes_to_unicode: every byte as a printable character, so BPE
// pieces never hold spaces or control bytes ("Ġ" is the space).
struct byte_map {
  std::array<std::string, 256> to_char;
  std::unordered_map<std::string, unsigned char> to_byte;
  byte_map() {
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC)
                             || (b >= 0xAE && b <= 0xFF);
      to_char[b] = utf8(printable ? b : next++);
      to_byte[to_char[b]] = static_cast<unsigned char>(b);
    }
  }
};

const byte_map& bytes_map() {
  static const byte_map m;
  return m;
}

void init_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buffer[ONIG_MAX_ERROR_MESSAGE_LEN];
  onig_error_code_to_str(buffer, code, info);
  return reinterpret_cast<const char*>(buffer);
}

bool is_null_or_empty(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null()
         || (j[key].is_string() && j[key].get<std::string>().empty());
}

} // namespace

// One `Split` expression with `Isolated` behaviour: matches and the text
// between them both become pieces.
struct hf_bpe::split_rule {
  regex_t* regex = nullptr;
  ~split_rule() {
    if (regex)
      onig_free(regex);
  }
  static expected<std::unique_ptr<split_rule>> compile(std::string_view p) {
    init_oniguruma();
    auto rule = std::make_unique<split_rule>();
    OnigErrorInfo info;
    const auto* begin = reinterpret_cast<const OnigUChar*>(p.data());
    const int r = onig_new(&rule->regex, begin, begin + p.size(),
                           ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                           ONIG_SYNTAX_DEFAULT, &info);
    if (r != ONIG_NORMAL)
      return status::error("pre-tokenizer pattern " + std::string(p) + ": "
                           + onig_message(r, &info));
    return rule;
  }
  status split(std::string_view text,
               std::vector<std::string_view>& out) const {
    const auto* s = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = s + text.size();
    OnigRegion* region = onig_region_new();
    std::size_t at = 0, last = 0;
    status result;
    while (at < text.size()) {
      const int r = onig_search(regex, s, end, s + at, end, region,
                                ONIG_OPTION_CHECK_VALIDITY_OF_STRING);
      if (r == ONIG_MISMATCH)
        break;
      if (r < 0) {
        result = status::error("encode: " + onig_message(r, nullptr));
        break;
      }
      const auto b = static_cast<std::size_t>(region->beg[0]);
      const auto e = static_cast<std::size_t>(region->end[0]);
      if (b > last)
        out.push_back(text.substr(last, b - last));
      if (e > b)
        out.push_back(text.substr(b, e - b));
      last = std::max(last, e);
      at = e > b ? e : b + utf8_length(static_cast<unsigned char>(text[b]));
    }
    onig_region_free(region, 1);
    if (result.ok() && last < text.size())
      out.push_back(text.substr(last));
    return result;
  }
};

hf_bpe::~hf_bpe() = default;

expected<std::shared_ptr<const hf_bpe>> hf_bpe::parse(std::string text,
                                                      std::string_view name) {
  const std::string at = std::string(name) + ": ";
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error(at + "not JSON");
  if (!j.contains("model") || !j["model"].is_object())
    return status::error(at + "no \"model\"");
  const json& model = j["model"];
  const std::string type = model.value("type",
                                       model.contains("merges") ? "BPE" : "");
  if (type != "BPE")
    return status::error(at + "model type \"" + type
                         + "\" is not supported (BPE only)");
  if (!is_null_or_empty(j, "normalizer"))
    return status::error(at + "normalizer \""
                         + j["normalizer"].value("type", "?")
                         + "\" is not supported (byte-level BPE has none)");
  if (!is_null_or_empty(model, "continuing_subword_prefix")
      || !is_null_or_empty(model, "end_of_word_suffix"))
    return status::error(at + "subword prefixes/suffixes are not supported");
  if (model.contains("dropout") && model["dropout"].is_number()
      && model["dropout"].get<double>() > 0)
    return status::error(at + "BPE dropout is not supported");

  auto t = std::shared_ptr<hf_bpe>(new hf_bpe);
  try {
    // Pre-tokenizers: Split and ByteLevel, alone or in a Sequence.
    bool byte_level = false;
    std::vector<const json*> stack;
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
      stack.push_back(&j["pre_tokenizer"]);
    std::vector<const json*> flat;
    while (!stack.empty()) {
      const json* p = stack.back();
      stack.pop_back();
      if (p->value("type", "") == "Sequence")
        for (auto it = (*p)["pretokenizers"].rbegin();
             it != (*p)["pretokenizers"].rend(); ++it)
          stack.push_back(&*it);
      else
        flat.push_back(p);
    }
    for (const json* p : flat) {
      const std::string kind = p->value("type", "");
      std::string pattern;
      if (kind == "ByteLevel") {
        byte_level = true;
        t->add_prefix_space_ = p->value("add_prefix_space", false);
        if (!p->value("use_regex", true))
          continue;
        pattern = gpt2_pattern;
      } else if (kind == "Split") {
        if (!(*p)["pattern"].contains("Regex")
            || p->value("behavior", "") != "Isolated"
            || p->value("invert", false))
          return status::error(at
                               + "only Split pre-tokenizers with a Regex "
                                 "pattern and Isolated behaviour are "
                                 "supported");
        pattern = (*p)["pattern"]["Regex"].get<std::string>();
      } else {
        return status::error(at + "pre-tokenizer \"" + kind
                             + "\" is not supported (byte-level BPE only)");
      }
      auto rule = split_rule::compile(pattern);
      if (!rule.ok())
        return status::error(at + rule.error().message());
      t->splits_.push_back(std::move(rule.value()));
    }
    if (!byte_level)
      return status::error(at
                           + "no ByteLevel pre-tokenizer (only byte-level "
                             "BPE is supported; a SentencePiece "
                             "tokenizer.model is read instead)");

    std::int64_t top = -1;
    for (const auto& [piece, id] : model.at("vocab").items()) {
      const auto i = id.get<std::int32_t>();
      if (i < 0)
        return status::error(at + "negative id for \"" + piece + "\"");
      t->vocab_[piece] = i;
      top = std::max<std::int64_t>(top, i);
    }
    for (const auto& a : j.value("added_tokens", json::array())) {
      const auto i = a.at("id").get<std::int32_t>();
      const auto content = a.at("content").get<std::string>();
      if (i < 0 || content.empty())
        return status::error(at + "bad added token \"" + content + "\"");
      t->added_tokens_.emplace_back(content, i);
      top = std::max<std::int64_t>(top, i);
    }
    if (top < 0)
      return status::error(at + "empty vocabulary");
    t->vocab_size_ = static_cast<std::uint32_t>(top + 1);
    t->pieces_.resize(t->vocab_size_);
    t->added_.assign(t->vocab_size_, false);
    for (const auto& [piece, id] : t->vocab_)
      t->pieces_[id] = piece;
    for (const auto& [content, id] : t->added_tokens_) {
      t->pieces_[id] = content;
      t->added_[id] = true;
    }
    // Longest first, so "<|end|>" never hides "<|end_of_text|>".
    std::stable_sort(t->added_tokens_.begin(), t->added_tokens_.end(),
                     [](const auto& a, const auto& b) {
                       return a.first.size() > b.first.size();
                     });

    std::int32_t rank = 0;
    for (const auto& m : model.at("merges")) {
      std::string a, b;
      if (m.is_string()) { // "a b"
        const auto s = m.get<std::string>();
        const auto space = s.find(' ');
        if (space == std::string::npos)
          return status::error(at + "merge \"" + s + "\" is not \"a b\"");
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else { // ["a", "b"]
        a = m.at(0).get<std::string>();
        b = m.at(1).get<std::string>();
      }
      t->merge_rank_.emplace(a + '\0' + b, rank++);
    }
    t->ignore_merges_ = model.value("ignore_merges", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto u = t->vocab_.find(model["unk_token"].get<std::string>());
      if (u != t->vocab_.end())
        t->unk_id_ = u->second;
    }
  } catch (const json::exception& e) {
    return status::error(at + e.what());
  }

  // The conventional names; the first added token of each kind wins.
  const auto find_added = [&](std::initializer_list<std::string_view> names) {
    for (const auto n : names)
      for (const auto& [content, id] : t->added_tokens_)
        if (content == n)
          return id;
    return std::int32_t{-1};
  };
  t->eos_id_ = find_added(
    {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"});
  t->bos_id_ = find_added({"<|begin_of_text|>", "<s>", "<bos>"});
  t->text_ = std::move(text);
  return std::shared_ptr<const hf_bpe>(std::move(t));
}

std::string hf_bpe::piece(std::int32_t id) const {
  if (id < 0 || static_cast<std::uint32_t>(id) >= vocab_size_)
    return {};
  return pieces_[id];
}

expected<std::vector<std::int32_t>> hf_bpe::encode(
  std::string_view text) const {
  std::vector<std::int32_t> ids;
  // Added tokens are matched in the raw text before anything else.
  std::size_t plain = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto hit = std::find_if(
      added_tokens_.begin(), added_tokens_.end(),
      [&](const auto& a) { return text.substr(i).starts_with(a.first); });
    if (hit == added_tokens_.end()) {
      ++i;
      continue;
    }
    TUTTI_RETURN_IF_ERROR(encode_plain(text.substr(plain, i - plain), ids));
    ids.push_back(hit->second);
    i += hit->first.size();
    plain = i;
  }
  TUTTI_RETURN_IF_ERROR(encode_plain(text.substr(plain), ids));
  return ids;
}

status hf_bpe::encode_plain(std::string_view text,
                            std::vector<std::int32_t>& out) const {
  if (text.empty())
    return {};
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces{text};
  for (const auto& rule : splits_) {
    std::vector<std::string_view> next;
    for (const auto p : pieces)
      TUTTI_RETURN_IF_ERROR(rule->split(p, next));
    pieces = std::move(next);
  }
  const auto& map = bytes_map();
  std::string mapped;
  for (const auto p : pieces) {
    mapped.clear();
    for (const unsigned char c : p)
      mapped += map.to_char[c];
    TUTTI_RETURN_IF_ERROR(encode_word(mapped, out));
  }
  return {};
}

status hf_bpe::encode_word(std::string_view mapped,
                           std::vector<std::int32_t>& out) const {
  if (ignore_merges_)
    if (const auto whole = vocab_.find(std::string(mapped));
        whole != vocab_.end()) {
      out.push_back(whole->second);
      return {};
    }
  std::vector<std::string> symbols;
  for (std::size_t i = 0; i < mapped.size();) {
    const auto n = utf8_length(static_cast<unsigned char>(mapped[i]));
    symbols.emplace_back(mapped.substr(i, n));
    i += n;
  }
  // Merge the lowest-ranked adjacent pair, everywhere it occurs, until no
  // pair has a merge.
  std::string key;
  while (symbols.size() > 1) {
    auto best = std::numeric_limits<std::int32_t>::max();
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      key = symbols[i] + '\0' + symbols[i + 1];
      if (const auto r = merge_rank_.find(key); r != merge_rank_.end())
        best = std::min(best, r->second);
    }
    if (best == std::numeric_limits<std::int32_t>::max())
      break;
    std::vector<std::string> merged;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size()) {
        key = symbols[i] + '\0' + symbols[i + 1];
        const auto r = merge_rank_.find(key);
        if (r != merge_rank_.end() && r->second == best) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          ++i;
          continue;
        }
      }
      merged.push_back(std::move(symbols[i]));
    }
    symbols = std::move(merged);
  }
  for (const auto& s : symbols) {
    const auto id = vocab_.find(s);
    if (id != vocab_.end())
      out.push_back(id->second);
    else if (unk_id_ >= 0)
      out.push_back(unk_id_);
    else
      return status::error("encode: piece \"" + s
                           + "\" is not in the vocabulary and there is no "
                             "unk_token");
  }
  return {};
}

std::string hf_bpe::decode(std::span<const std::int32_t> ids) const {
  const auto& map = bytes_map();
  std::string text;
  for (const auto id : ids) {
    const std::string& p = pieces_[id];
    if (added_[id]) {
      text += p;
      continue;
    }
    for (std::size_t i = 0; i < p.size();) {
      const auto n = utf8_length(static_cast<unsigned char>(p[i]));
      const auto ch = p.substr(i, n);
      const auto b = map.to_byte.find(ch);
      if (b != map.to_byte.end())
        text += static_cast<char>(b->second);
      else
        text += ch; // not a byte-level character: as written
      i += n;
    }
  }
  return text;
}

} // namespace tutti::tokenizer::detail
