// tutti export CHECKPOINT --format hf --out DIR: the weights of a checkpoint
// as Hugging Face MixtralForCausalLM (config.json + model.safetensors).

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
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::cli {

namespace {

namespace fs = std::filesystem;

// Hugging Face's config.json for the checkpoint's model. rope_theta and
// rms_norm_eps are kept as text in the shard (exactly as configured) and
// written as numbers.
std::string config_json(const store::shard_meta& m) {
  auto i = [&](const char* k) { return m.ints.count(k) ? m.ints.at(k) : 0; };
  auto number = [&](const char* k) {
    auto j = nlohmann::ordered_json::parse(
      m.strings.count(k) ? m.strings.at(k) : std::string("0"), nullptr, false);
    return j.is_number() ? j : nlohmann::ordered_json(0);
  };
  nlohmann::ordered_json j;
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["vocab_size"] = i("vocab_size");
  j["hidden_size"] = i("hidden_size");
  j["intermediate_size"] = i("intermediate_size");
  j["num_hidden_layers"] = i("num_hidden_layers");
  j["num_attention_heads"] = i("num_attention_heads");
  j["num_key_value_heads"] = i("num_key_value_heads");
  j["head_dim"] = i("hidden_size")
                  / std::max<int64_t>(1, i("num_attention_heads"));
  j["max_position_embeddings"] = i("max_seq_len");
  j["rope_theta"] = number("rope_theta");
  j["rms_norm_eps"] = number("rms_norm_eps");
  j["num_local_experts"] = i("num_experts");
  j["num_experts_per_tok"] = i("router_top_k");
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "float32";
  j["tutti_step"] = m.step;
  return j.dump(2) + "\n";
}

} // namespace

int export_command(const std::vector<std::string>& args) {
  command_line cl("export", "CHECKPOINT|--init CONFIG --format hf --out DIR",
                  "the checkpoint's weights as Hugging Face "
                  "MixtralForCausalLM\n(config.json + model.safetensors)");
  cl.options()("format", po::value<std::string>(),
               "hf (safetensors) or gguf (llama.cpp)")(
    "dtype", po::value<std::string>(), "gguf only: f32 (default) or f16")(
    "out", po::value<std::string>(), "output directory")(
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
  std::vector<store::named_tensor> tensors;
  store::shard_meta meta0;
  store::manifest manifest;
  if (vm.count("init")) {
    auto cfg = load_job_config(vm["init"].as<std::string>());
    if (!cfg.ok())
      return fail(2, "export: " + cfg.message());
    initial_weights(cfg.value(), tensors, meta0);
  } else {
    if (auto err = store::verify_checkpoint(checkpoint); !err)
      return fail(2, "export: " + err.message());
    auto read = store::read_manifest(checkpoint);
    if (!read.ok())
      return fail(2, "export: " + read.message());
    manifest = read.value();
  }
  for (const auto& entry : manifest.shards) {
    auto shard = store::read_shard_file(fs::path(checkpoint) / entry.file);
    if (!shard.ok())
      return fail(2, "export: " + shard.message());
    if (shard.value().meta.rank == 0)
      meta0 = shard.value().meta;
    const auto& ints = shard.value().meta.ints;
    const int64_t first = ints.count("first_expert") ? ints.at("first_expert")
                                                     : 0;
    for (auto& t : shard.value().tensors) {
      if (t.name.rfind("adam_", 0) == 0)
        continue; // optimizer state stays with tutti
      if (t.name == "router_bias") {
        // Selection-only biases, under DeepSeek-V3's Hugging Face name;
        // transformers' Mixtral ignores them (they are 0 without bias
        // balancing).
        const int64_t experts = t.shape[1];
        for (int64_t l = 0; l < t.shape[0]; ++l)
          tensors.push_back(
            {"model.layers." + std::to_string(l)
               + ".block_sparse_moe.gate.e_score_correction_bias",
             {experts},
             std::vector<float>(t.data.begin() + l * experts,
                                t.data.begin() + (l + 1) * experts)});
        continue;
      }
      const auto experts = t.name.find(".block_sparse_moe.experts.");
      if (experts == std::string::npos) {
        tensors.push_back({t.name, t.shape, std::move(t.data)});
        continue;
      }
      // A block [count, out, in] of this shard's experts: one HF tensor
      // per expert, named by its global index.
      const auto which = t.name.substr(t.name.rfind('.') + 1); // w1|w2|w3
      const auto prefix = t.name.substr(0, t.name.rfind('.'));
      const int64_t count = t.shape[0], per = t.shape[1] * t.shape[2];
      for (int64_t j = 0; j < count; ++j)
        tensors.push_back(
          {prefix + "." + std::to_string(first + j) + "." + which + ".weight",
           {t.shape[1], t.shape[2]},
           std::vector<float>(t.data.begin() + j * per,
                              t.data.begin() + (j + 1) * per)});
    }
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
                  "llama.cpp's Mixtral has none, so the GGUF routes "
                  "without them\n");
    std::printf("exported step %lld: %zu tensors to %s\n",
                static_cast<long long>(meta0.step), tensors.size(),
                file.c_str());
    return 0;
  }
  if (auto err = store::write_file_atomic(fs::path(out) / "config.json",
                                          config_json(meta0));
      !err)
    return fail(1, "export: " + err.message());
  if (auto err = store::write_safetensors(fs::path(out) / "model.safetensors",
                                          tensors, {{"format", "pt"}});
      !err)
    return fail(1, "export: " + err.message());
  std::printf("exported step %lld: %zu tensors to %s (config.json, "
              "model.safetensors)\n",
              static_cast<long long>(meta0.step), tensors.size(), out.c_str());
  return 0;
}

} // namespace tutti::cli
