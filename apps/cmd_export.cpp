// tutti export CHECKPOINT --format hf --out DIR: the weights of a checkpoint
// as Hugging Face MixtralForCausalLM or Qwen3MoeForCausalLM, by the model's
// family (config.json + model.safetensors), with
// the run's tokenizer (tokenizer.model, tokenizer_config.json,
// special_tokens_map.json) and generation_config.json, so a Hugging Face
// loader or a GGUF converter takes the directory as it is.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "command_line.hpp"
#include "commands.hpp"
#include "export_gguf.hpp"
#include "initial_weights.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/hf_config.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/store/safetensors.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::cli {

namespace {

namespace fs = std::filesystem;

// --tokenizer, else the run's: the checkpoint is RUN/checkpoints/step-N,
// and the tokenizer.model (or tokenizer.json) is in RUN, RUN/tokenizer or
// RUN/data. Byte-level when there is none.
expected<tokenizer::tokenizer> run_tokenizer(const fs::path& checkpoint,
                                             const std::string& given) {
  if (!given.empty())
    return tokenizer::tokenizer::load(given);
  const auto run =
    fs::absolute(checkpoint).lexically_normal().parent_path().parent_path();
  for (const auto& dir : {run, run / "tokenizer", run / "data"})
    if (tokenizer::holds_tokenizer(dir))
      return tokenizer::tokenizer::load(dir);
  return tokenizer::tokenizer::bytes();
}

// The tokenizer files a Llama-family loader reads (LlamaTokenizer over a
// SentencePiece model, or the fast tokenizer over a tokenizer.json: no
// BOS/EOS added, as tutti trained) and the token ids generation stops on.
status write_tokenizer_files(const fs::path& out,
                             const tokenizer::tokenizer& tok,
                             std::int64_t max_seq_len) {
  nlohmann::ordered_json gen;
  gen["_from_model_config"] = false;
  if (tok.bos_id() >= 0)
    gen["bos_token_id"] = tok.bos_id();
  if (tok.eos_id() >= 0)
    gen["eos_token_id"] = tok.eos_id();
  gen["do_sample"] = false;
  gen["max_length"] = max_seq_len;
  TUTTI_RETURN_IF_ERROR(store::write_file_atomic(out / "generation_config.json",
                                                 gen.dump(2) + "\n"));
  if (tok.kind() == "bytes")
    return {};
  TUTTI_RETURN_IF_ERROR(tok.save(out));
  nlohmann::ordered_json special;
  for (const auto& [key, id] : {std::pair{"bos_token", tok.bos_id()},
                                {"eos_token", tok.eos_id()},
                                {"unk_token", tok.unk_id()}})
    if (id >= 0)
      special[key] = tok.piece(id);
  nlohmann::ordered_json cfg = special;
  // A tokenizer.json is read as it is by the fast tokenizer class.
  cfg["tokenizer_class"] = tok.kind() == "sentencepiece"
                             ? "LlamaTokenizer"
                             : "PreTrainedTokenizerFast";
  cfg["add_bos_token"] = false;
  cfg["add_eos_token"] = false;
  cfg["legacy"] = false;
  cfg["model_max_length"] = max_seq_len;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["sp_model_kwargs"] = nlohmann::ordered_json::object();
  TUTTI_RETURN_IF_ERROR(store::write_file_atomic(out / "tokenizer_config.json",
                                                 cfg.dump(2) + "\n"));
  return store::write_file_atomic(out / "special_tokens_map.json",
                                  special.dump(2) + "\n");
}

} // namespace

int export_command(const std::vector<std::string>& args) {
  command_line cl("export", "CHECKPOINT|--init CONFIG --format hf --out DIR",
                  "the checkpoint's weights as Hugging Face "
                  "MixtralForCausalLM or\nQwen3MoeForCausalLM (config.json + "
                  "model.safetensors)");
  cl.options()("format", po::value<std::string>(),
               "hf (safetensors) or gguf (llama.cpp)")(
    "dtype", po::value<std::string>(), "gguf only: f32 (default) or f16")(
    "out", po::value<std::string>(),
    "output directory")("tokenizer", po::value<std::string>(),
                        "hf: tokenizer.model, tokenizer.json or their "
                        "directory (default: the run's, in RUN_DIR, "
                        "RUN_DIR/tokenizer or RUN_DIR/data)")(
    "init", po::value<std::string>(),
    "CONFIG: instead of a checkpoint, the config's model as initialised "
    "before training (a random model to serve)");
  cl.positional("checkpoint");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!(vm.count("checkpoint") || vm.count("init")) || !vm.count("out"))
    return cl.bad("usage: tutti export CHECKPOINT --format hf --out DIR");
  const auto checkpoint = vm.count("checkpoint")
                            ? vm["checkpoint"].as<std::string>()
                            : std::string();
  const auto format = vm.count("format") ? vm["format"].as<std::string>()
                                         : std::string();
  const auto out = vm["out"].as<std::string>();
  if (format != "hf" && format != "gguf")
    return cl.bad("--format: hf or gguf, got '" + format + "'");
  const auto dtype = vm.count("dtype") ? vm["dtype"].as<std::string>()
                                       : std::string("f32");
  if (dtype != "f32" && (dtype != "f16" || format != "gguf"))
    return cl.bad("--dtype: f32, or f16 with --format gguf; got '" + dtype
                  + "'");
  // An --init model has no run to take a tokenizer from: byte-level
  // unless one is given.
  expected<tokenizer::tokenizer> tok = tokenizer::tokenizer::bytes();
  if (vm.count("tokenizer") || !checkpoint.empty())
    tok = run_tokenizer(checkpoint, vm.count("tokenizer")
                                      ? vm["tokenizer"].as<std::string>()
                                      : std::string());
  if (!tok.ok())
    return fail(2, "export: " + tok.message());
  std::vector<store::named_tensor> tensors;
  store::shard_meta meta0;
  if (vm.count("init")) {
    auto cfg = load_job_config(vm["init"].as<std::string>());
    if (!cfg.ok())
      return fail(2, "export: " + cfg.message());
    initial_weights(cfg.value(), tensors, meta0);
  } else {
    auto read = model::read_checkpoint(checkpoint);
    if (!read.ok())
      return fail(2, "export: " + read.message());
    tensors = std::move(read.value().tensors);
    meta0 = std::move(read.value().rank0);
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec)
    return fail(1, "export: cannot create " + out + ": " + ec.message());
  if (format == "gguf") {
    const auto file = fs::path(out) / ("model-" + dtype + ".gguf");
    bool dropped = false;
    if (auto err = export_gguf(tensors, meta0, file, dtype == "f16", dropped);
        !err)
      return fail(1, "export: " + err.message());
    if (dropped)
      std::printf("note: the router's selection biases are not zero; "
                  "llama.cpp's architecture has none, so the GGUF routes "
                  "without them\n");
    std::printf("exported step %lld: %zu tensors to %s\n",
                static_cast<long long>(meta0.step), tensors.size(),
                file.c_str());
    return 0;
  }
  const auto vocab = meta0.ints.count("vocab_size")
                       ? meta0.ints.at("vocab_size")
                       : 0;
  if (tok.value().kind() != "bytes" && tok.value().vocab_size() > vocab)
    return fail(2, "export: the tokenizer has "
                     + std::to_string(tok.value().vocab_size())
                     + " tokens, the model only " + std::to_string(vocab));
  auto config = nlohmann::ordered_json::parse(model::hf_config_text(meta0));
  if (tok.value().bos_id() >= 0)
    config["bos_token_id"] = tok.value().bos_id();
  if (tok.value().eos_id() >= 0)
    config["eos_token_id"] = tok.value().eos_id();
  if (auto err = store::write_file_atomic(fs::path(out) / "config.json",
                                          config.dump(2) + "\n");
      !err)
    return fail(1, "export: " + err.message());
  if (auto err = write_tokenizer_files(
        out, tok.value(),
        meta0.ints.count("max_seq_len") ? meta0.ints.at("max_seq_len") : 0);
      !err)
    return fail(1, "export: " + err.message());
  // Under the family's names (config.json says which).
  const auto family = model::shape_of(meta0).family;
  for (auto& t : tensors)
    t.name = model::hf_tensor_name(family, t.name);
  if (auto err = store::write_safetensors(fs::path(out) / "model.safetensors",
                                          tensors, {{"format", "pt"}});
      !err)
    return fail(1, "export: " + err.message());
  std::printf("exported step %lld: %zu tensors to %s (config.json, "
              "model.safetensors, generation_config.json%s)\n",
              static_cast<long long>(meta0.step), tensors.size(), out.c_str(),
              tok.value().kind() == "sentencepiece"
                ? ", tokenizer.model, tokenizer_config.json"
              : tok.value().kind() == "huggingface-bpe"
                ? ", tokenizer.json, tokenizer_config.json"
                : "; byte-level tokens, no tokenizer files");
  return 0;
}

} // namespace tutti::cli
