// tutti export CHECKPOINT --format hf --out DIR: the weights of a checkpoint
// as Hugging Face MixtralForCausalLM or Qwen3MoeForCausalLM, by the model's
// family (config.json + model.safetensors), with
// the run's tokenizer (tokenizer.model, tokenizer_config.json,
// special_tokens_map.json) and generation_config.json, so a Hugging Face
// loader or a GGUF converter takes the directory as it is. --dtype int8
// stores the experts' weights in 8 bits (with_int8_experts below), which
// `tutti serve` serves as they are; --format gguf --dtype q8_0 the same
// tensors in llama.cpp's Q8_0.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "command_line.hpp"
#include "commands.hpp"
#include "export_gguf.hpp"
#include "initial_weights.hpp"
#include "tutti/kernels/packed_gemm.hpp"
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

// --dtype int8: each expert matrix as int8 codes (I8, under its own name)
// followed by its per-output-channel scales (`<name>_scale`, F32 [out, 1],
// as compressed-tensors stores a channel-wise int8 weight), quantized as
// serve.weight_dtype int8 quantizes at load: both serve the same bits.
// Embeddings, attention, norms, router and LM head stay F32.
std::vector<store::named_tensor> with_int8_experts(
  std::vector<store::named_tensor> tensors) {
  std::vector<store::named_tensor> out;
  out.reserve(tensors.size() * 2);
  for (auto& t : tensors) {
    const bool expert =
      t.name.find(".block_sparse_moe.experts.") != std::string::npos
      && t.shape.size() == 2;
    out.push_back(std::move(t));
    if (!expert)
      continue;
    auto& w = out.back();
    const int64_t rows = w.shape[0], cols = w.shape[1];
    store::named_tensor scale{w.name + "_scale", {rows, 1},
                              std::vector<float>(rows)};
    kernels::quantize_matrix_int8(w.data.data(), rows, cols, w.data.data(),
                                  scale.data.data());
    w.int8 = true;
    out.push_back(std::move(scale));
  }
  return out;
}

// config.json's note that the experts are int8 (compressed-tensors'
// vocabulary: weight-only, symmetric, per channel; tutti reads the
// `_scale` tensors, not this).
nlohmann::ordered_json int8_quantization_config() {
  nlohmann::ordered_json weights = {{"num_bits", 8},       {"type", "int"},
                                    {"symmetric", true},   {"strategy", "channel"},
                                    {"dynamic", false}};
  nlohmann::ordered_json group = {
    {"targets", {"re:.*block_sparse_moe\\.experts\\..*"}},
    {"weights", weights},
    {"input_activations", nullptr},
    {"output_activations", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "int-quantized"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", {"lm_head"}}};
}

} // namespace

int export_command(const std::vector<std::string>& args) {
  command_line cl("export", "CHECKPOINT|--init CONFIG --format hf --out DIR",
                  "the checkpoint's weights as Hugging Face "
                  "MixtralForCausalLM or\nQwen3MoeForCausalLM (config.json + "
                  "model.safetensors)");
  cl.options()("format", po::value<std::string>(),
               "hf (safetensors) or gguf (llama.cpp)")(
    "dtype", po::value<std::string>(),
    "f32 (default); hf: int8 (the experts' weights int8 with a float32 "
    "scale per output channel); gguf: f16 or q8_0 (the experts' weights "
    "in llama.cpp's Q8_0)")(
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
  const bool gguf = format == "gguf";
  if (dtype != "f32" && !(gguf && (dtype == "f16" || dtype == "q8_0"))
      && !(!gguf && dtype == "int8"))
    return cl.bad("--dtype: f32; int8 with --format hf; f16 or q8_0 with "
                  "--format gguf; got '"
                  + dtype + "'");
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
    const auto stored = dtype == "f16"    ? gguf_dtype::f16
                        : dtype == "q8_0" ? gguf_dtype::q8_0
                                          : gguf_dtype::f32;
    if (auto err = export_gguf(tensors, meta0, file, stored, dropped); !err)
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
  if (dtype == "int8") {
    config["quantization_config"] = int8_quantization_config();
    tensors = with_int8_experts(std::move(tensors));
  }
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
