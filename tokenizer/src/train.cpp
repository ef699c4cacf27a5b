#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <thread>
#include <unordered_map>

#include "tutti/store/atomic_file.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::tokenizer {
namespace {

// SentencePiece pulls sentences through this; ours come from a callback so
// the corpus can be files, directories, .gz or JSON lines.
class callback_iterator : public sentencepiece::SentenceIterator {
public:
  explicit callback_iterator(const sentence_source& next) : next_(next) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

private:
  const sentence_source& next_;
  std::string value_;
  bool done_ = false;
};

} // namespace

status train(const sentence_source& next, const train_options& options,
             const std::filesystem::path& dir) {
  if (options.vocab_size < 8)
    return status::error("tokenizer vocabulary must be at least 8, got "
                         + std::to_string(options.vocab_size));
  const unsigned threads = options.threads
                             ? options.threads
                             : std::max(1u,
                                        std::thread::hardware_concurrency());
  // <unk> 0, <s> 1, </s> 2, no padding id; byte fallback so any UTF-8
  // (and any byte) round-trips instead of becoming <unk>.
  const std::unordered_map<std::string, std::string> args = {
    {"model_type", options.type == model_type::bpe ? "bpe" : "unigram"},
    {"vocab_size", std::to_string(options.vocab_size)},
    {"character_coverage", std::to_string(options.character_coverage)},
    {"input_sentence_size", std::to_string(options.max_sentences)},
    {"shuffle_input_sentence", "true"},
    {"num_threads", std::to_string(threads)},
    {"byte_fallback", "true"},
    // NFKC without nmt's folding of newlines and runs of spaces: code and
    // indented text keep their layout through encode and decode.
    {"normalization_rule_name", "nfkc"},
    {"remove_extra_whitespaces", "false"},
    {"split_digits", "true"},
    {"unk_id", "0"},
    {"bos_id", "1"},
    {"eos_id", "2"},
    {"pad_id", "-1"},
    {"hard_vocab_limit", "false"},
    {"minloglevel", "2"},
  };
  // Sentence sampling is random; a fixed seed makes training repeatable.
  sentencepiece::SetRandomGeneratorSeed(
    static_cast<unsigned>(options.seed ? options.seed : 1));
  callback_iterator sentences(next);
  if (sentences.done())
    return status::error(std::string("tokenizer train: the input has no text"));
  std::string model;
  const auto s = sentencepiece::SentencePieceTrainer::Train(args, &sentences,
                                                            &model);
  if (!s.ok())
    return status::error("tokenizer train: " + s.ToString());
  auto loaded = tokenizer::from_model_bytes(model, "trained model");
  if (!loaded.ok())
    return loaded.error();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return status::error("cannot create directory " + dir.string() + ": "
                         + ec.message());
  return loaded.value().save(dir);
}

} // namespace tutti::tokenizer
