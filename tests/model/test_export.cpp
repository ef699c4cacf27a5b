// tutti export --format hf: model.safetensors follows the format rules, and
// the model it holds, loaded back, gives the same loss on a fixed batch as
// the checkpoint it came from (and as the run's own held-out evaluation).
// A Qwen3-MoE checkpoint exports under Qwen3MoeForCausalLM's names and
// config (and as llama.cpp's qwen3moe), reads back as the same tensors, and
// refuses a Mixtral resume.

#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "test_support.hpp"
#include "tutti/comm/gloo_communicator.hpp"
#include "tutti/data/batch_sampler.hpp"
#include "tutti/data/dataset.hpp"
#include "local_experts.hpp"
#include "tutti/train/rank_model.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/expert_blocks.hpp"
#include "tutti/store/safetensors.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// name -> values, from either source; loads a world-1 model and evaluates.
double loss_of(const job_config& world1,
               const std::map<std::string, std::vector<float>>& tensors,
               const data::batch& batch) {
  gloo::rendezvous::HashStore store;
  std::unique_ptr<comm::communicator> world;
  REQUIRE(comm::make_gloo_communicator(store, 0, 1, {}, world).ok());
  local_experts experts(world1);
  train::rank_model m(world1, {world.get(), world.get(), nullptr}, experts);
  for (const auto& spec : m.layout().tensors()) {
    REQUIRE(tensors.count(spec.name));
    const auto& v = tensors.at(spec.name);
    REQUIRE(static_cast<int64_t>(v.size()) == spec.numel);
    m.params().upload(m.stream(), v.data(), v.size(), spec.offset);
  }
  const auto& md = world1.model;
  const int64_t per = md.intermediate_size * md.hidden_size;
  for (int64_t l = 0; l < md.num_hidden_layers; ++l)
    for (const char* w : {"w1", "w2", "w3"}) {
      auto off = experts.layout.at(model::expert_block_name(l, w)).offset;
      for (int64_t e = 0; e < world1.moe.num_experts; ++e) {
        auto name = "model.layers." + std::to_string(l)
                    + ".block_sparse_moe.experts." + std::to_string(e) + "." + w
                    + ".weight";
        REQUIRE(tensors.count(name));
        const auto& v = tensors.at(name);
        REQUIRE(static_cast<int64_t>(v.size()) == per);
        std::copy(v.begin(), v.end(), experts.params.begin() + off + e * per);
      }
    }
  const int64_t E = world1.moe.num_experts;
  for (int64_t l = 0; l < md.num_hidden_layers; ++l) {
    auto name = "model.layers." + std::to_string(l)
                + ".block_sparse_moe.gate.e_score_correction_bias";
    REQUIRE(tensors.count(name));
    const auto& bias = tensors.at(name);
    m.router_bias().upload(m.stream(), bias.data(), bias.size(), l * E);
  }
  double sum = 0;
  int64_t tokens = 0;
  train::step_timers t;
  REQUIRE(m.evaluate(batch.inputs.data(), batch.targets.data(),
                     static_cast<int64_t>(batch.rows), sum, tokens, t)
            .ok());
  return sum / static_cast<double>(tokens);
}

} // namespace

TEST_CASE("exported safetensors reload to the same loss", "[integration]") {
  auto dir = scratch("export");
  auto data = dir / "data";
  REQUIRE(synth_data(data));
  auto cfg_path = dir / "c.yaml";
  write_text(cfg_path,
             small_config(data.string(), (dir / "run").string(), 2, 12));
  auto r = run(tutti_bin() + " run " + cfg_path.string() + " --quiet");
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto ckpt = dir / "run" / "checkpoints" / store::checkpoint_dir_name(12);

  // tutti ckpt list | verify | show on what the run committed.
  auto listed = run(tutti_bin() + " ckpt list " + (dir / "run").string());
  INFO(listed.output);
  CHECK(listed.status == 0);
  CHECK(listed.output.find("step-00000012") != std::string::npos);
  auto verified = run(tutti_bin() + " ckpt verify " + ckpt.string());
  CHECK(verified.status == 0);
  CHECK(verified.output.find("ok (2 shards") != std::string::npos);
  auto shown = run(tutti_bin() + " ckpt show " + ckpt.string());
  CHECK(shown.status == 0);
  CHECK(shown.output.find("model.embed_tokens.weight") != std::string::npos);
  CHECK(shown.output.find("[32,32]") != std::string::npos);
  CHECK(shown.output.find("adam_m/lm_head.weight") != std::string::npos);

  auto out = dir / "hf";
  auto e = run(tutti_bin() + " export " + ckpt.string() + " --format hf --out "
               + out.string());
  INFO(e.output);
  REQUIRE(e.status == 0);
  REQUIRE(read_text(out / "config.json").find("\"model_type\": \"mixtral\"")
          != std::string::npos);

  // The format rules, checked by hand on the bytes.
  auto bytes = read_text(out / "model.safetensors");
  REQUIRE(bytes.size() > 8);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  REQUIRE(header_len + 8 <= bytes.size());
  auto header = bytes.substr(8, header_len);
  CHECK(header.front() == '{');
  CHECK(header.find("\"dtype\":\"F32\"") != std::string::npos);
  CHECK(header.find("lm_head.weight") != std::string::npos);
  CHECK(header.find("block_sparse_moe.experts.3.w2.weight")
        != std::string::npos);
  auto hf = store::read_safetensors(out / "model.safetensors");
  INFO(hf.message());
  REQUIRE(hf.ok());
  size_t data_bytes = 0;
  std::map<std::string, std::vector<float>> from_hf;
  for (auto& t : hf.value()) {
    data_bytes += t.data.size() * 4;
    from_hf[t.name] = t.data;
  }
  CHECK(8 + header_len + data_bytes == bytes.size()); // offsets cover all

  // The same model straight from the checkpoint's shards.
  std::map<std::string, std::vector<float>> from_ckpt;
  auto loaded = load_job_config(cfg_path.string());
  REQUIRE(loaded.ok());
  const auto& cfg = *loaded;
  for (int rank = 0; rank < 2; ++rank) {
    auto f = store::read_shard_file(ckpt / store::shard_file_name(rank));
    REQUIRE(f.ok());
    auto held = store::block_experts_of(f.value().meta);
    REQUIRE(held.ok());
    for (auto& t : f.value().tensors) {
      if (t.name.rfind("adam_", 0) == 0)
        continue;
      if (t.name == "router_bias") {
        const int64_t E = t.shape[1];
        for (int64_t l = 0; l < t.shape[0]; ++l)
          from_ckpt["model.layers." + std::to_string(l)
                    + ".block_sparse_moe.gate.e_score_correction_bias"] =
            std::vector<float>(t.data.begin() + l * E,
                               t.data.begin() + (l + 1) * E);
        continue;
      }
      auto at = t.name.find(".block_sparse_moe.experts.");
      if (at == std::string::npos) {
        from_ckpt[t.name] = t.data;
        continue;
      }
      const int64_t per = t.shape[1] * t.shape[2];
      const int64_t layer = std::stoll(t.name.substr(13)); // model.layers.L.
      for (int64_t j = 0; j < t.shape[0]; ++j)
        from_ckpt[t.name.substr(0, t.name.rfind('.')) + "."
                  + std::to_string(held.value().at(layer, j))
                  + t.name.substr(t.name.rfind('.'))
                  + ".weight"] = std::vector<float>(t.data.begin() + j * per,
                                                    t.data.begin()
                                                      + (j + 1) * per);
    }
  }
  CHECK(from_ckpt.size() == from_hf.size());

  auto world1 = cfg;
  world1.cluster.world_size = world1.cluster.nproc_per_node = 1;
  world1.cluster.ep_size = 1;
  world1.train.global_batch_size = 8;
  auto val = data::load_split(data, "val");
  REQUIRE(val.ok());
  auto batch = data::eval_windows(val.value(), 32, 8);
  const double a = loss_of(world1, from_hf, batch);
  const double b = loss_of(world1, from_ckpt, batch);
  CHECK(a == b);
  auto eval = metric_series(dir / "run" / "metrics.jsonl", "eval_loss");
  REQUIRE(!eval.empty());
  CHECK(std::abs(a - eval.back()) / eval.back() < 1e-5);

  // A flipped byte is named by `ckpt verify` and refused by export.
  auto shard = ckpt / store::shard_file_name(1);
  auto bytes1 = read_text(shard);
  bytes1[bytes1.size() / 2] ^= 0x01;
  std::ofstream(shard, std::ios::binary) << bytes1;
  auto bad = run(tutti_bin() + " ckpt verify " + ckpt.string());
  INFO(bad.output);
  CHECK(bad.status == 1);
  CHECK(bad.output.find("shard-00001.ckpt") != std::string::npos);
  auto refused = run(tutti_bin() + " export " + ckpt.string()
                     + " --format hf --out " + (dir / "hf2").string());
  CHECK(refused.status == 2);
}

TEST_CASE("a Qwen3-MoE checkpoint exports as Qwen3MoeForCausalLM",
          "[integration]") {
  auto dir = scratch("export_qwen3");
  auto data = dir / "data";
  REQUIRE(synth_data(data));
  auto text = small_config(data.string(), (dir / "run").string(), 2, 4);
  text = replace_once(text, "model:\n",
                      "model:\n  family: qwen3_moe\n  head_dim: 12\n");
  auto cfg_path = dir / "c.yaml";
  write_text(cfg_path, text);
  auto r = run(tutti_bin() + " run " + cfg_path.string() + " --quiet");
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto ckpt = dir / "run" / "checkpoints" / store::checkpoint_dir_name(4);

  auto out = dir / "hf";
  auto e = run(tutti_bin() + " export " + ckpt.string() + " --format hf --out "
               + out.string());
  INFO(e.output);
  REQUIRE(e.status == 0);
  const auto config = read_text(out / "config.json");
  CHECK(has(config, "\"model_type\": \"qwen3_moe\""));
  CHECK(has(config, "\"Qwen3MoeForCausalLM\""));
  CHECK(has(config, "\"head_dim\": 12"));
  CHECK(has(config, "\"moe_intermediate_size\": 64"));
  CHECK(has(config, "\"num_experts\": 4"));

  // The family's names, and the same tensors as the checkpoint's once read
  // back (the loader translates them to tutti's).
  auto hf = store::read_safetensors(out / "model.safetensors");
  REQUIRE(hf.ok());
  std::set<std::string> names;
  for (const auto& t : hf.value())
    names.insert(t.name);
  CHECK(names.count("model.layers.1.mlp.experts.3.down_proj.weight"));
  CHECK(names.count("model.layers.0.mlp.gate.weight"));
  CHECK(names.count("model.layers.0.self_attn.k_norm.weight"));
  CHECK(names.count("model.layers.0.block_sparse_moe.gate.weight") == 0);
  auto from_hf = model::load_weights(out);
  auto from_ckpt = model::load_weights(ckpt);
  INFO(from_hf.message() << from_ckpt.message());
  REQUIRE(from_hf.ok());
  REQUIRE(from_ckpt.ok());
  CHECK(from_hf.value().shape.family == model_family::qwen3_moe);
  CHECK(from_ckpt.value().shape.head_dim == 12);
  std::map<std::string, std::vector<float>> a, b;
  for (const auto& t : from_hf.value().tensors)
    a[t.name] = t.data;
  for (const auto& t : from_ckpt.value().tensors)
    b[t.name] = t.data;
  CHECK(a == b);

  // llama.cpp's qwen3moe layout (tests/peer/test_llama_peer.sh runs it).
  auto gguf = run(tutti_bin() + " export " + ckpt.string()
                  + " --format gguf --out " + (dir / "gguf").string());
  INFO(gguf.output);
  CHECK(gguf.status == 0);
  const auto file = read_text(dir / "gguf" / "model-f32.gguf");
  for (const char* key :
       {"qwen3moe.attention.key_length", "qwen3moe.expert_feed_forward_length",
        "blk.1.attn_k_norm.weight", "blk.0.ffn_down_exps.weight"})
    CHECK(has(file, key));

  // Resumed under a Mixtral config: refused, naming the key.
  write_text(cfg_path,
             small_config(data.string(), (dir / "run").string(), 2, 6));
  auto resumed = run(tutti_bin() + " run " + cfg_path.string() + " --quiet");
  INFO(resumed.output);
  CHECK(resumed.status != 0);
  CHECK(has(resumed.output, "model.family"));
}
