// config/: what is derived from the key declarations: the fingerprint every
// node must agree on, the README's key reference, and the one supervision
// default.

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/config/key_reference.hpp"

#include "config_test_support.hpp"

using namespace tutti;
using namespace tutti::testing::config;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("the fingerprint follows the declarations", "[unit]") {
  const auto c = parse(base);
  const auto fp = config_fingerprint(c);
  std::map<std::string, std::string> entries(fp.begin(), fp.end());
  CHECK(entries.size() == fp.size()); // each key once

  SECTION("exactly the keys every node must agree on") {
    const std::vector<std::string> agreed{
      "cluster_config.world_size",
      "cluster_config.nnodes",
      "cluster_config.nproc_per_node",
      "cluster_config.communication_backend",
      "cluster_config.device",
      "cluster_config.ep_size",
      "cluster_config.tensor_model_parallel_size",
      "cluster_config.pipeline_model_parallel_size",
      "cluster_config.pipeline_layers",
      "cluster_config.pipeline_first_stage_layers",
      "cluster_config.pipeline_last_stage_layers",
      "cluster_config.pipeline_virtual_stages",
      "cluster_config.collective_timeout_ms",
      "cluster_config.coordinator",
      "cluster_config.nodes[0]",
      "model.family",
      "model.vocab_size",
      "model.hidden_size",
      "model.intermediate_size",
      "model.num_hidden_layers",
      "model.num_attention_heads",
      "model.num_key_value_heads",
      "model.rope_theta",
      "model.max_seq_len",
      "model.rms_norm_eps",
      "model.init_std",
      "model.head_dim",
      "model.kv_lora_rank",
      "model.q_lora_rank",
      "model.qk_nope_head_dim",
      "model.qk_rope_head_dim",
      "model.v_head_dim",
      "model.rope_interleave",
      "model.dense_intermediate_size",
      "moe_config.num_experts",
      "moe_config.router_top_k",
      "moe_config.router_temperature",
      "moe_config.norm_topk_prob",
      "moe_config.scoring_func",
      "moe_config.n_group",
      "moe_config.topk_group",
      "moe_config.routed_scaling_factor",
      "moe_config.n_shared_experts",
      "moe_config.first_k_dense_replace",
      "moe_config.capacity_factor",
      "moe_config.aux_loss_coeff",
      "moe_config.z_loss_coeff",
      "moe_config.bias_update_rate",
      "moe_config.all_to_all_communication",
      "moe_config.communication_buffer_size",
      "moe_config.combine_chunks",
      "moe_config.dispatch_dtype",
      "moe_config.placement_plan",
      "train.steps",
      "train.global_batch_size",
      "train.seq_len",
      "train.lr",
      "train.min_lr",
      "train.warmup_steps",
      "train.weight_decay",
      "train.beta1",
      "train.beta2",
      "train.eps",
      "train.grad_clip",
      "train.gemm_precision",
      "train.seed",
      "train.micro_batches",
      "train.precision.params",
      "train.precision.grads",
      "train.precision.master_weights",
      "train.precision.moments",
      "train.eval_interval",
      "train.eval_sequences",
      "data.shard_per_rank",
      "checkpoint.interval_steps",
      "recovery.heartbeat_interval_ms",
      "recovery.heartbeat_timeout_ms",
      "recovery.rendezvous_timeout_ms",
      "supervision.expert_shard.strategy",
      "supervision.expert_shard.restart",
      "supervision.expert_shard.max_restarts",
      "supervision.expert_shard.period_s",
      "supervision.data_loader.strategy",
      "supervision.data_loader.restart",
      "supervision.data_loader.max_restarts",
      "supervision.data_loader.period_s",
      "supervision.checkpoint_writer.strategy",
      "supervision.checkpoint_writer.restart",
      "supervision.checkpoint_writer.max_restarts",
      "supervision.checkpoint_writer.period_s"};
    std::set<std::string> keys;
    for (const auto& [key, value] : fp)
      keys.insert(key);
    CHECK(keys == std::set<std::string>(agreed.begin(), agreed.end()));
  }
  SECTION("values are written exactly, enums by name") {
    CHECK(entries["cluster_config.device"] == "cpu");
    CHECK(entries["train.gemm_precision"] == "fp32");
    CHECK(entries["supervision.data_loader.restart"] == "permanent");
    CHECK(entries["model.rms_norm_eps"] == "1.0000000000000001e-05");
    CHECK(entries["train.seed"] == "1234");
    CHECK(entries["data.shard_per_rank"] == "false");
    // The derived address of node 0: host, coordinator port + 1.
    CHECK(entries["cluster_config.nodes[0]"] == "127.0.0.1:7101 rack ");
  }
  SECTION("first_difference names the first key that differs") {
    const auto ours = fingerprint_text(c);
    CHECK(first_difference(ours, ours).empty());
    auto other = parse(with("  combine_chunks: 2", "  combine_chunks: 4",
                            with("  capacity_factor: 0",
                                 "  capacity_factor: 0\n  combine_chunks: 2")));
    CHECK(first_difference(ours, fingerprint_text(other))
          == "moe_config.combine_chunks: 2 here, 4 there");
    other = parse(base
                  + "supervision:\n  data_loader:\n    restart: "
                    "temporary\n");
    CHECK(first_difference(ours, fingerprint_text(other))
          == "supervision.data_loader.restart: permanent here, temporary "
             "there");
    CHECK(first_difference(ours, "")
          == "cluster_config.world_size: 2 here, (absent) there");
  }
  SECTION("nodes must hold the same placement plan, wherever it lies") {
    CHECK(entries["moe_config.placement_plan"] == "contiguous");
    const auto dir = std::filesystem::temp_directory_path()
                     / ("tutti_fp_plan_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto write = [&](const std::string& name, const std::string& text) {
      std::ofstream(dir / name) << text;
      return (dir / name).string();
    };
    const std::string plan = "{\"format\": \"tutti-placement-1\", "
                             "\"layers\": 1, \"experts\": 2, \"ranks\": 2, "
                             "\"expert_at\": [[1, 0]]}\n";
    auto a = write("a.json", plan), b = write("b.json", plan);
    auto moved = write("c.json", plan.substr(0, plan.find("[[")) + "[[0, 1]]}\n");
    auto cfg = [&](const std::string& path) {
      return fingerprint_text(parse(with(
        "  capacity_factor: 0", "  capacity_factor: 0\n  placement: " + path)));
    };
    CHECK(cfg(a) == cfg(b)); // the content counts, not the path
    CHECK_THAT(first_difference(cfg(a), cfg(moved)),
               StartsWith("moe_config.placement_plan: fnv1a64:"));
    CHECK_THAT(first_difference(fingerprint_text(c), cfg(a)),
               StartsWith("moe_config.placement_plan: contiguous here"));
    std::filesystem::remove_all(dir);
  }
  SECTION("keys nodes need not agree on leave it unchanged") {
    auto other = parse(with("  dir: some/data",
                            "  dir: elsewhere\n  prefetch: 7",
                            base
                              + "alerts:\n  loss_spike_factor: 9\n"
                                "diag:\n  on_start: warn\n"));
    CHECK(fingerprint_text(other) == fingerprint_text(c));
  }
}

TEST_CASE("the key reference lists every declared key", "[unit]") {
  const auto table = job_key_reference();
  CHECK_THAT(table, StartsWith("| key | type | default | allowed | doc |\n"));
  CHECK_THAT(table, Contains("| `moe_config.combine_chunks` | integer | `2` | "
                             ">= 1 (1 = no overlap) |"));
  CHECK_THAT(table, Contains("| `cluster_config.device` | cpu \\| cuda | "
                             "`cpu` |"));
  CHECK_THAT(table, Contains("| `model.vocab_size` | integer | required |"));
  CHECK_THAT(table, Contains("| `supervision.expert_shard.period_s` | number "
                             "| `60` |"));
  CHECK_THAT(table, Contains("| `cluster_config.nodes[].port` |"));
}

TEST_CASE("the key reference lists the serve, manifest and gateway keys",
          "[unit]") {
  const auto serve = serve_key_reference();
  CHECK_THAT(serve, StartsWith("| key | type | default | allowed | doc |\n"));
  CHECK_THAT(serve, Contains("| `serve.max_queue` | integer | `64` | >= 1 |"));
  CHECK_THAT(serve, Contains("| `serve.kv_cache_bytes` | bytes: N, NKiB, "
                             "NMiB or NGiB | `64MiB` | > 0 |"));
  CHECK_THAT(serve, Contains("| `serve.listen` | HOST:PORT | "
                             "`127.0.0.1:8000` |"));
  CHECK_THAT(serve, Contains("| `serve.offload.threshold` | number | "
                             "required | in (0, 1] |"));
  CHECK_THAT(serve, Contains("| `serve.replan.window_steps` | integer | "
                             "`50` | >= 1 |"));
  CHECK_THAT(serve, Contains("| `serve.racks` | list of strings |"));
  const auto manifest = manifest_key_reference();
  CHECK_THAT(manifest, Contains("| `kind` | InferenceService | required |"));
  CHECK_THAT(manifest, Contains("| `spec.parallelism.num_nodes` | integer | "
                                "`1` | >= 1 |"));
  // spec.serve's keys are serve's: listed once, under serve.
  CHECK_THAT(manifest, Contains("| `spec.serve` | section |"));
  CHECK(manifest.find("spec.serve.max_queue") == std::string::npos);
  const auto gateway = gateway_key_reference();
  CHECK_THAT(gateway, Contains("| `gateway.listen` | HOST:PORT | "
                               "`127.0.0.1:9000` |"));
  CHECK_THAT(gateway, Contains("| `stable.version` | string | required |"));
  CHECK_THAT(gateway, Contains("| `canary.steps` | list of numbers | "
                               "`[1, 10, 50, 100]` | not empty, each in "
                               "(0, 100] |"));
  CHECK_THAT(gateway, Contains("| `autoscale.max_replicas` | integer | "
                               "min_replicas | >= 1 |"));
  const auto document = config_reference_document();
  for (const auto* table : {&serve, &manifest, &gateway})
    CHECK_THAT(document, Contains(*table));
}

TEST_CASE("one supervision default, in the config", "[unit]") {
  // The actors' supervisor_flags take theirs from supervision_spec{}.
  const supervision_spec spec;
  CHECK(spec.period_s == 60);
  CHECK(spec.period() == std::chrono::seconds(60));
  CHECK(spec.max_restarts == 3);
  CHECK(spec.strategy == restart_strategy::one_for_one);
}
