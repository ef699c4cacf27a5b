// `tutti plan`'s answers for the users' clusters:
// - the pretraining document's YAML as written (configs/seed-pretrain.yaml:
//   cluster and MoE blocks only) with Mixtral-8x7B, Mixtral-8x22B and
//   DeepSeek-V3 presets plans, plain and --search, and fits 80 GB on its
//   8,192 accelerators with restart in place, the answer naming the keys;
// - DeepSeek-V3 in its published layout on 2,048 × 80 GB (PP16, EP64,
//   ZeRO-1 data parallel, no TP, bf16 parameters and gradients, fp32 master
//   weights, bf16 or fp32 moments) fits, item by item;
// - DeepSeek-V3, Mixtral-8x22B and Qwen3-235B-A22B with their own experts
//   on the document's cluster: --search's best layout for each;
// - the presets' parameter counts are the published ones;
// - mixed precision and uneven stages as the plan counts them;
// - what training refuses (bf16 state) is refused at job start by key.
// Each plan runs in well under a second; the times are printed.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "test_support.hpp"

using namespace tutti::testing;

namespace {

struct timed {
  command_result r;
  double seconds = 0;
};

timed plan(const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  timed out;
  out.r = run(tutti_bin() + " plan " + args, 30);
  out.seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
  std::printf("%.3f s: tutti plan %s\n", out.seconds, args.c_str());
  return out;
}

nlohmann::json plan_json(const std::string& args) {
  const auto t = plan(args + " --json");
  INFO(t.r.output);
  REQUIRE(t.r.status == 0);
  return nlohmann::json::parse(t.r.output);
}

// The document's cluster, the model's own experts.
const char* seed_cluster = R"(cluster_config:
  world_size: 8192
  nnodes: 1024
  nproc_per_node: 8
  communication_backend: "custom_high_speed"
)";

// DeepSeek-V3 as trained: 2,048 GPUs, PP16 (the last stage one layer and
// the head), EP64, ZeRO-1 over DP128, 15,360 sequences of 4,096 tokens in
// micro-batches of one. Dropless routing's worst case (every EP peer's
// tokens at one rank) would reserve 43 GiB of dispatch buffers, so the
// buffer is set to 2 GiB (4x the balanced load's 470 MB). Restart in
// place is off: its replay log holds every expert input of the step on
// the device (hundreds of GiB at 120 sequences per rank).
std::string deepseek_2048(const std::string& moments) {
  return R"(cluster_config:
  world_size: 2048
  nnodes: 256
  nproc_per_node: 8
  device: cuda
  communication_backend: nccl
  device_memory_gb: 80
  pipeline_model_parallel_size: 16
  pipeline_last_stage_layers: 1
  ep_size: 64
moe_config:
  communication_buffer_size: 2147483648
train:
  steps: 1
  global_batch_size: 15360
  seq_len: 4096
  micro_batches: 120
  optimizer_sharding: true
  recompute: full
  precision: {params: bf16, grads: bf16, master_weights: fp32, moments: )"
         + moments + R"(}
supervision:
  expert_shard:
    max_restarts: 0
data: {dir: data}
run: {dir: run}
)";
}

} // namespace

TEST_CASE("the pretraining document's YAML as written plans with each "
          "preset and fits 8,192 x 80 GB with restart in place",
          "[unit]") {
  const auto seed = source_dir() + "/configs/seed-pretrain.yaml";
  for (const char* preset : {"mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"}) {
    const auto plain = plan(seed + " --model " + preset);
    INFO(preset << ": " << plain.r.output);
    REQUIRE(plain.r.status == 0);
    CHECK(plain.seconds < 10); // generous: a loaded machine; see the print
    // The default EP: the largest dividing 128 experts and DP 8192.
    CHECK(plain.r.output.find("ep 128, 128 experts top-2")
          != std::string::npos);
    CHECK(plain.r.output.find("note: cluster_config.device_memory_gb: not "
                              "set; planned for 80 GB")
          != std::string::npos);
    CHECK(plain.r.output.find("optimizer second set") != std::string::npos);
    // The layout as pasted does not fit; the answer names one that does.
    CHECK(plain.r.output.find("\nfits: ") != std::string::npos);
    CHECK(plain.r.output.find("set cluster_config: {tensor_model_parallel_"
                              "size: ")
          != std::string::npos);

    const auto search = plan(seed + " --model " + preset + " --search");
    INFO(search.r.output);
    REQUIRE(search.r.status == 0);
    CHECK(search.seconds < 10);
    CHECK(search.r.output.find("counted: the experts' second set and the "
                               "replay log of restart in place")
          != std::string::npos);
    CHECK(search.r.output.find("\nfastest: ") != std::string::npos);
    const auto j = plan_json(seed + " --model " + preset + " --search");
    REQUIRE(j["fit"].get<int64_t>() > 0);
    CHECK(j["layouts"][0]["memory_bytes"].get<double>() <= 80e9);
    CHECK(j["keys"].get<std::string>().find("ep_size: ") != std::string::npos);
  }
}

TEST_CASE("--search drops a layout the config gets wrong and says so",
          "[unit]") {
  auto dir = scratch("plan_clusters_fix");
  // 61 layers in 16 equal stages and EP 8192 over 128 experts: refused as
  // a layout, searched past.
  write_text(dir / "bad.yaml",
             replace_once(seed_cluster, "  nproc_per_node: 8\n",
                          "  nproc_per_node: 8\n  ep_size: 8192\n"
                          "  pipeline_model_parallel_size: 16\n"));
  const auto refused = plan((dir / "bad.yaml").string() + " --model deepseek-v3");
  INFO(refused.r.output);
  CHECK(refused.r.status == 2);
  const auto fixed =
    plan((dir / "bad.yaml").string() + " --model deepseek-v3 --search");
  INFO(fixed.r.output);
  REQUIRE(fixed.r.status == 0);
  CHECK(fixed.r.output.find("; --search chooses the layout")
        != std::string::npos);
  CHECK(fixed.r.output.find("none fits: ") != std::string::npos);
  CHECK(fixed.r.output.find("supervision.expert_shard.max_restarts: 0")
        != std::string::npos);
  // 1,024 sequences do not split over 8,192 data-parallel ranks, the
  // layout without parallelism keys: the search still answers.
  write_text(dir / "batch.yaml",
             std::string(seed_cluster)
               + "train:\n  steps: 1\n  global_batch_size: 1024\n"
                 "  seq_len: 4096\n");
  const auto batch =
    plan((dir / "batch.yaml").string() + " --model mixtral-8x22b --search");
  INFO(batch.r.output);
  REQUIRE(batch.r.status == 0);
  CHECK(batch.r.output.find("train.global_batch_size: must be divisible")
        != std::string::npos);
  CHECK(batch.r.output.find("\nfastest: ") != std::string::npos);
}

TEST_CASE("DeepSeek-V3 in its published layout fits 2,048 x 80 GB",
          "[unit]") {
  auto dir = scratch("plan_clusters_deepseek");
  for (const char* moments : {"bf16", "fp32"}) {
    const auto path = dir / (std::string("ds_") + moments + ".yaml");
    write_text(path, deepseek_2048(moments));
    const auto text = plan(path.string() + " --model deepseek-v3");
    INFO(text.r.output);
    REQUIRE(text.r.status == 0);
    for (const char* item :
         {"capacity plan: world 2048 (256 nodes x 8), ep 64, 256 experts "
          "top-8",
          "memory per rank (params bf16, grads bf16, master weights fp32, "
          "moments ",
          "TP1 PP16 layers [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1] "
          "EP64 DP128 m120 recompute full sharded-optimizer",
          "\n  weights ", "\n  gradients ", "\n  master weights ",
          "\n  optimizer moments ", "\n  activations ", "\n  working buffers ",
          "\n  dispatch buffers ", "\n  total "})
      CHECK(text.r.output.find(item) != std::string::npos);
    CHECK(text.r.output.find("WARNING") == std::string::npos);
    const auto j = plan_json(path.string() + " --model deepseek-v3");
    CHECK(j["fits"].get<bool>());
    const auto& m = j["memory"];
    CHECK(m["total"].get<double>() <= 80e9);
    // bf16 weights and gradients alike; the fp32 master copy of the dense
    // weights sharded over DP 128, the experts' whole: under twice the
    // bf16 weights. Moments: two per master weight, each 2 or 4 bytes.
    CHECK(m["gradients"] == m["weights"]);
    CHECK(m["master_weights"].get<double>() > 0);
    CHECK(m["master_weights"].get<double>()
          < 2 * m["weights"].get<double>());
    const double per_master = std::string(moments) == "bf16" ? 1 : 2;
    CHECK(m["optimizer"].get<double>()
          == Approx(per_master * m["master_weights"].get<double>()));
  }
}

TEST_CASE("DeepSeek-V3, Mixtral-8x22B and Qwen3-235B-A22B on the "
          "document's 8,192 accelerators: --search's best layout",
          "[unit]") {
  auto dir = scratch("plan_clusters_own_experts");
  write_text(dir / "restart.yaml", seed_cluster);
  write_text(dir / "no_restart.yaml",
             std::string(seed_cluster)
               + "supervision:\n  expert_shard:\n    max_restarts: 0\n");
  // With their own experts (top-8 for DeepSeek-V3 and Qwen3) restart in
  // place's replay log, every expert input of a step on the device, is
  // what decides: Mixtral-8x22B (top-2) fits with it, the top-8 models
  // fit without it.
  auto best = [&](const std::string& file, const std::string& preset) {
    const auto j =
      plan_json((dir / file).string() + " --model " + preset + " --search");
    std::printf("%s, %s: %lld of %lld fit; %s\n", preset.c_str(),
                file.c_str(), static_cast<long long>(j["fit"].get<int64_t>()),
                static_cast<long long>(j["considered"].get<int64_t>()),
                j.contains("keys") ? j["keys"].get<std::string>().c_str()
                                   : "none");
    return j;
  };
  CHECK(best("restart.yaml", "mixtral-8x22b")["fit"].get<int64_t>() > 0);
  for (const char* preset : {"deepseek-v3", "qwen3-235b-a22b"}) {
    INFO(preset);
    CHECK(best("restart.yaml", preset)["fit"].get<int64_t>() == 0);
    const auto j = best("no_restart.yaml", preset);
    REQUIRE(j["fit"].get<int64_t>() > 0);
    CHECK(j["layouts"][0]["memory_bytes"].get<double>() <= 80e9);
  }
}

TEST_CASE("the presets' parameters are the published ones", "[unit]") {
  auto dir = scratch("plan_clusters_presets");
  write_text(dir / "cluster.yaml", seed_cluster);
  // Total and active parameters (billions), DeepSeek-V3's without its
  // multi-token-prediction module.
  const struct {
    const char* name;
    double total, active;
  } published[] = {{"mixtral-8x7b", 46.7, 12.9},
                   {"mixtral-8x22b", 141, 39},
                   {"deepseek-v3", 671, 37},
                   {"qwen3-30b-a3b", 30.5, 3.3},
                   {"qwen3-235b-a22b", 235, 22}};
  for (const auto& p : published) {
    INFO(p.name);
    const auto j =
      plan_json((dir / "cluster.yaml").string() + " --model " + p.name);
    const double total = j["dense_params"].get<double>()
                         + j["expert_params_total"].get<double>();
    CHECK(total / 1e9 == Approx(p.total).epsilon(0.02));
    CHECK(j["active_params_per_token"].get<double>() / 1e9
          == Approx(p.active).epsilon(0.03));
  }
}

TEST_CASE("mixed precision and uneven stages as the plan counts them",
          "[unit]") {
  auto dir = scratch("plan_clusters_precision");
  const auto base = read_text(source_dir() + "/configs/seed_8192.yaml");
  auto memory = [&](const std::string& name, const std::string& cluster_keys,
                    const std::string& train_keys) {
    auto text = replace_once(base, "  ep_size: 64\n",
                             "  ep_size: 64\n" + cluster_keys);
    text = replace_once(text, "  seq_len: 4096\n",
                        "  seq_len: 4096\n" + train_keys);
    write_text(dir / (name + ".yaml"), text);
    return plan_json((dir / (name + ".yaml")).string())["memory"];
  };
  const auto fp32 = memory("fp32", "", "");
  const auto bf16 = memory(
    "bf16", "", "  precision: {params: bf16, grads: bf16}\n");
  CHECK(fp32["master_weights"].get<double>() == 0);
  CHECK(bf16["weights"].get<double>() * 2 == fp32["weights"].get<double>());
  CHECK(bf16["gradients"] == bf16["weights"]);
  CHECK(bf16["master_weights"] == fp32["weights"]);
  CHECK(bf16["optimizer"] == fp32["optimizer"]);
  const auto sharded = memory(
    "sharded", "",
    "  precision: {params: bf16, grads: bf16, moments: bf16}\n"
    "  optimizer_sharding: true\n");
  CHECK(sharded["master_weights"].get<double>()
        < bf16["master_weights"].get<double>());
  CHECK(sharded["optimizer"] == sharded["master_weights"]);

  // 32 layers in 4 stages: [5, 9, 9, 9] against equal stages. A later
  // stage is then the fullest, and fuller than an equal stage.
  const auto equal = memory("equal", "  pipeline_model_parallel_size: 4\n",
                            "");
  const auto uneven = memory(
    "uneven",
    "  pipeline_model_parallel_size: 4\n  pipeline_layers: [5, 9, 9, 9]\n",
    "");
  CHECK(equal["pipeline_stages"] == 4);
  CHECK(uneven["fullest_stage"].get<int64_t>() > 0);
  CHECK(uneven["weights"].get<double>() > equal["weights"].get<double>());
}

TEST_CASE("bf16 training state is refused at job start, naming the key",
          "[unit]") {
  auto dir = scratch("plan_clusters_refusal");
  auto text = read_text(source_dir() + "/configs/quickstart.yaml");
  text = replace_once(text, "  seq_len: 64\n",
                      "  seq_len: 64\n  precision: {params: bf16}\n");
  write_text(dir / "bf16.yaml", text);
  const auto r = run(tutti_bin() + " run " + (dir / "bf16.yaml").string(), 30);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(r.output.find("train.precision.params: bf16") != std::string::npos);
  // The plan still counts it.
  const auto planned = plan((dir / "bf16.yaml").string());
  CHECK(planned.r.status == 0);
  CHECK(planned.r.output.find("params bf16") != std::string::npos);
}

TEST_CASE("the layout search weighs the experts' replay under PP against "
          "keeping their activations",
          "[unit]") {
  auto dir = scratch("plan_clusters_keep");
  auto text = read_text(source_dir() + "/configs/quickstart.yaml");
  text = replace_once(text, "  num_hidden_layers: 2\n",
                      "  num_hidden_layers: 4\n");
  write_text(dir / "quick.yaml", text);
  const auto j =
    plan_json((dir / "quick.yaml").string() + " --search --top 100000");
  // The same layout with and without kept activations: the kept one holds
  // more and, with the replayed forwards gone, steps faster.
  int pairs = 0;
  for (const auto& kept : j["layouts"]) {
    if (!kept["keep_expert_activations"].get<bool>())
      continue;
    for (const auto& plain : j["layouts"]) {
      bool same = !plain["keep_expert_activations"].get<bool>();
      for (const char* key : {"tp", "pp", "pipeline_virtual_stages", "ep",
                              "dp", "micro_batches", "recompute",
                              "optimizer_sharding", "pipeline_layers"})
        same = same && plain[key] == kept[key];
      if (!same)
        continue;
      ++pairs;
      CHECK(kept["pp"].get<int64_t>() > 1);
      CHECK(kept["recompute"] != "full");
      CHECK(kept["memory_bytes"].get<double>()
            > plain["memory_bytes"].get<double>());
      CHECK(kept["compute_s"].get<double>() < plain["compute_s"].get<double>());
    }
  }
  CHECK(pairs > 0);
}
