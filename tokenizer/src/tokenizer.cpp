#include "tutti/tokenizer/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include "hf_bpe.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::tokenizer {

struct tokenizer::impl {
  std::string model_bytes;
  sentencepiece::SentencePieceProcessor processor; // unused for bytes
  std::shared_ptr<const detail::hf_bpe> hf;        // tokenizer.json
  bool bytes = true;
};

tokenizer::tokenizer() {
  static const auto shared = std::make_shared<const impl>();
  impl_ = shared;
}

expected<tokenizer> tokenizer::from_model_bytes(std::string bytes,
                                                std::string_view name) {
  auto m = std::make_shared<impl>();
  m->bytes = false;
  m->model_bytes = std::move(bytes);
  const auto s = m->processor.LoadFromSerializedProto(m->model_bytes);
  if (!s.ok())
    return status::error(std::string(name)
                         + ": not a SentencePiece model: " + s.ToString());
  tokenizer t;
  t.impl_ = std::move(m);
  return t;
}

expected<tokenizer> tokenizer::from_hf_json(std::string json,
                                            std::string_view name) {
  auto parsed = detail::hf_bpe::parse(std::move(json), name);
  if (!parsed.ok())
    return parsed.error();
  auto m = std::make_shared<impl>();
  m->bytes = false;
  m->hf = std::move(parsed.value());
  m->model_bytes = m->hf->text();
  tokenizer t;
  t.impl_ = std::move(m);
  return t;
}

bool holds_tokenizer(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / model_file_name, ec)
         || std::filesystem::exists(dir / hf_json_file_name, ec);
}

expected<tokenizer> tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = path / model_file_name;
    if (!std::filesystem::exists(file, ec))
      file = path / hf_json_file_name;
    if (!std::filesystem::exists(file, ec))
      return tokenizer{};
  }
  auto bytes = store::read_file(file);
  if (!bytes.ok())
    return bytes.error();
  if (file.extension() == ".json")
    return from_hf_json(std::move(bytes.value()), file.string());
  return from_model_bytes(std::move(bytes.value()), file.string());
}

std::string tokenizer::kind() const {
  return impl_->bytes ? "bytes"
         : impl_->hf  ? "huggingface-bpe"
                      : "sentencepiece";
}

std::uint32_t tokenizer::vocab_size() const {
  if (impl_->hf)
    return impl_->hf->vocab_size();
  return impl_->bytes
           ? 256u
           : static_cast<std::uint32_t>(impl_->processor.GetPieceSize());
}

std::int32_t tokenizer::eos_id() const {
  if (impl_->hf)
    return impl_->hf->eos_id();
  return impl_->bytes ? -1 : impl_->processor.eos_id();
}
std::int32_t tokenizer::bos_id() const {
  if (impl_->hf)
    return impl_->hf->bos_id();
  return impl_->bytes ? -1 : impl_->processor.bos_id();
}
std::int32_t tokenizer::unk_id() const {
  if (impl_->hf)
    return impl_->hf->unk_id();
  return impl_->bytes ? -1 : impl_->processor.unk_id();
}

std::string tokenizer::piece(std::int32_t id) const {
  if (id < 0 || static_cast<std::uint32_t>(id) >= vocab_size())
    return {};
  if (impl_->bytes)
    return std::string(1, static_cast<char>(id));
  if (impl_->hf)
    return impl_->hf->piece(id);
  return impl_->processor.IdToPiece(id);
}

expected<std::vector<std::int32_t>> tokenizer::encode(
  std::string_view text) const {
  if (impl_->bytes)
    return std::vector<std::int32_t>(
      reinterpret_cast<const unsigned char*>(text.data()),
      reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  if (impl_->hf)
    return impl_->hf->encode(text);
  std::vector<int> ids;
  const auto s = impl_->processor.Encode(
    absl::string_view(text.data(), text.size()), &ids);
  if (!s.ok())
    return status::error("sentencepiece encode: " + s.ToString());
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

expected<std::string> tokenizer::decode(
  std::span<const std::int32_t> ids) const {
  const auto vocab = vocab_size();
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::uint32_t>(ids[i]) >= vocab)
      return status::error("decode: token " + std::to_string(ids[i])
                           + " at position " + std::to_string(i)
                           + " is outside the vocabulary of "
                           + std::to_string(vocab));
  if (impl_->bytes)
    return std::string(ids.begin(), ids.end());
  if (impl_->hf)
    return impl_->hf->decode(ids);
  std::string text;
  const auto s = impl_->processor.Decode(
    std::vector<int>(ids.begin(), ids.end()), &text);
  if (!s.ok())
    return status::error("sentencepiece decode: " + s.ToString());
  return text;
}

const std::string& tokenizer::model_bytes() const { return impl_->model_bytes; }

status tokenizer::save(const std::filesystem::path& dir) const {
  if (impl_->bytes)
    return {};
  return store::write_file_atomic(
    dir / (impl_->hf ? hf_json_file_name : model_file_name),
    impl_->model_bytes);
}

expected<model_type> parse_model_type(std::string_view name) {
  if (name == "unigram")
    return model_type::unigram;
  if (name == "bpe")
    return model_type::bpe;
  return status::error("tokenizer model must be unigram or bpe, got '"
                       + std::string(name) + "'");
}

} // namespace tutti::tokenizer
