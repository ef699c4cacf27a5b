// config/: parse_job_config is strict. A valid config parses with its
// defaults filled in; every refusal is a failed expected whose message is
// one line naming the offending key (or, for YAML syntax, the source).

#include <catch2/catch.hpp>

#include <chrono>
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

TEST_CASE("a valid config parses with defaults filled in", "[unit]") {
  const auto c = parse(base);
  CHECK(c.source_path == "test.yaml");
  CHECK(c.cluster.world_size == 2);
  CHECK(c.cluster.nnodes == 1);
  CHECK(c.cluster.nproc_per_node == 2);
  // ep_size 0 means "all ranks".
  CHECK(c.cluster.ep_size == 2);
  CHECK(c.ep_size() == 2);
  CHECK(c.experts_per_rank() == 2);
  CHECK(c.cluster.communication_backend == "gloo");
  CHECK(c.cluster.backend() == backend_kind::gloo);
  CHECK(c.cluster.device == compute_device::cpu);
  CHECK(c.train.gemm_precision == gemm_precision::fp32);
  CHECK(c.cluster.tensor_model_parallel_size == 1);
  CHECK(c.cluster.pipeline_model_parallel_size == 1);
  CHECK(c.cluster.host == "127.0.0.1");
  // More data-parallel ranks than experts: the experts spread over as
  // many as divide them (8 ranks, 4 experts: EP4, two expert replicas).
  const auto wide =
    parse(with("  world_size: 2", "  world_size: 8",
               with("  nproc_per_node: 2", "  nproc_per_node: 8", base)));
  CHECK(wide.ep_size() == 4);
  // With tensor parallelism, ep_size 0 means "all data-parallel ranks".
  const auto tp = parse(
    with("  ep_size: 0", "  ep_size: 0\n  tensor_model_parallel_size: 2"));
  CHECK(tp.tp_size() == 2);
  CHECK(tp.dp_size() == 1);
  CHECK(tp.ep_size() == 1);
  CHECK(tp.tp_rank_of(1) == 1);
  CHECK(tp.dp_rank_of(1) == 0);
  // TP and PP together (world 4): the stage outermost.
  const auto tp_pp = parse(
    with("  world_size: 2", "  world_size: 4",
         with("  nproc_per_node: 2", "  nproc_per_node: 4",
              with("  ep_size: 0", "  ep_size: 0\n"
                                   "  tensor_model_parallel_size: 2\n"
                                   "  pipeline_model_parallel_size: 2"))));
  CHECK(tp_pp.dp_size() == 1);
  CHECK(tp_pp.ep_size() == 1);
  CHECK(tp_pp.tp_rank_of(1) == 1);
  CHECK(tp_pp.pp_stage_of(1) == 0);
  CHECK(tp_pp.tp_rank_of(2) == 0);
  CHECK(tp_pp.pp_stage_of(2) == 1);
  // TP innermost (Megatron's order), then the data-parallel index: on
  // 16 ranks of TP2·PP2 (dp 4, EP2) a TP group is two consecutive ranks,
  // and an EP group two dp indices of one stage and TP index, 2 apart.
  const auto order = parse(
    with("  world_size: 2", "  world_size: 16",
         with("  nproc_per_node: 2", "  nproc_per_node: 16",
              with("  ep_size: 0", "  ep_size: 2\n"
                                   "  tensor_model_parallel_size: 2\n"
                                   "  pipeline_model_parallel_size: 2"))));
  REQUIRE(order.dp_size() == 4);
  CHECK(order.rank_at(1, 2, 1) == 13);
  CHECK(order.tp_rank_of(13) == 1);
  CHECK(order.dp_rank_of(13) == 2);
  CHECK(order.pp_stage_of(13) == 1);
  CHECK(order.ep_member_of(13) == 0);
  CHECK(order.ep_group_of(13) == std::vector<int64_t>{13, 15});
  CHECK(order.ep_group_of(2) == std::vector<int64_t>{0, 2});
  CHECK(c.cluster.collective_timeout_ms == 60000);

  CHECK(c.model.vocab_size == 32);
  CHECK(c.model.hidden_size == 32);
  CHECK(c.model.intermediate_size == 64);
  CHECK(c.model.num_hidden_layers == 2);
  CHECK(c.model.num_attention_heads == 4);
  CHECK(c.model.num_key_value_heads == 2);
  CHECK(c.model.max_seq_len == 32);
  CHECK(c.model.head_dim() == 8);
  CHECK(c.model.rope_theta == 10000.0);
  CHECK(c.model.rms_norm_eps == 1e-5);
  CHECK(c.model.init_std == 0.02);

  CHECK(c.moe.num_experts == 4);
  CHECK(c.moe.router_top_k == 2);
  CHECK(c.moe.capacity_factor == 0.0);
  CHECK(c.moe.router_temperature == 1.0);
  CHECK(c.moe.aux_loss_coeff == 0.0);
  CHECK(c.moe.z_loss_coeff == 0.0);
  CHECK(c.moe.bias_update_rate == 0.0);
  CHECK(c.moe.scoring == scoring_func::softmax);
  CHECK(c.moe.n_group == 1);
  CHECK(c.moe.topk_group == 1);
  CHECK(c.moe.routed_scaling_factor == 1.0);
  const auto sigmoid = parse(with(
    "  router_top_k: 2",
    "  router_top_k: 2\n  scoring_func: sigmoid\n  n_group: 2\n"
    "  topk_group: 1\n  routed_scaling_factor: 2.5\n  norm_topk_prob: false"));
  CHECK(sigmoid.moe.scoring == scoring_func::sigmoid);
  CHECK(sigmoid.moe.n_group == 2);
  CHECK(sigmoid.moe.topk_group == 1);
  CHECK(sigmoid.moe.routed_scaling_factor == 2.5);
  CHECK_FALSE(sigmoid.moe.norm_topk_prob);
  CHECK(c.moe.n_shared_experts == 0);
  CHECK(c.moe.first_k_dense_replace == 0);
  CHECK(c.model.dense_intermediate_size == 0);

  CHECK(c.train.steps == 10);
  CHECK(c.train.global_batch_size == 8);
  CHECK(c.train.seq_len == 32);
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.min_lr == 1e-4);
  CHECK(c.train.warmup_steps == 0);
  CHECK(c.train.grad_clip == 1.0);
  CHECK(c.train.seed == 1234u);
  CHECK(c.train.eval_interval == 0);
  CHECK(c.train.eval_sequences == 0);
  CHECK(c.train.log_interval == 1);

  CHECK(c.data.dir == "some/data");
  CHECK(c.data.shard_per_rank == false);
  CHECK(c.data.prefetch == 2);
  CHECK(c.run.dir == "some/run"); // relative paths kept as written
}

TEST_CASE("explicit values override defaults", "[unit]") {
  auto yaml = with("  ep_size: 0",
                   "  ep_size: 1\n  communication_backend: nccl\n"
                   "  device: cuda\n  collective_timeout_ms: 12345");
  yaml = with("  capacity_factor: 0",
              "  capacity_factor: 1.25\n  router_temperature: 0.5", yaml);
  yaml = with("  seq_len: 32",
              "  seq_len: 16\n  seed: 18446744073709551615\n"
              "  gemm_precision: bf16\n"
              "  log_interval: 7\n  eval_sequences: 4",
              yaml);
  yaml = with("  dir: some/data", "  dir: d\n  shard_per_rank: true", yaml);
  const auto c = parse(yaml);
  CHECK(c.cluster.ep_size == 1);
  CHECK(c.experts_per_rank() == 4);
  CHECK(c.cluster.communication_backend == "nccl");
  CHECK(c.cluster.backend() == backend_kind::nccl);
  CHECK(c.cluster.device == compute_device::cuda);
  CHECK(c.train.gemm_precision == gemm_precision::bf16);
  CHECK(c.cluster.collective_timeout_ms == 12345);
  CHECK(c.moe.capacity_factor == 1.25);
  CHECK(c.moe.router_temperature == 0.5);
  CHECK(c.train.seq_len == 16);
  CHECK(c.train.seed == 18446744073709551615ull);
  CHECK(c.train.log_interval == 7);
  CHECK(c.train.eval_sequences == 4);
  CHECK(c.data.shard_per_rank == true);
}

TEST_CASE("cluster_config is optional and defaults to one rank", "[unit]") {
  auto yaml = base.substr(base.find("model:"));
  // The default world is 1, so the batch (8) divides it.
  const auto c = parse(yaml);
  CHECK(c.cluster.world_size == 1);
  CHECK(c.cluster.ep_size == 1);
  CHECK(c.experts_per_rank() == 4);
}

TEST_CASE("pipeline parallelism takes the distributed optimizer and "
          "recomputation",
          "[unit]") {
  const auto c = parse(with(
    "  steps: 10",
    "  steps: 10\n  optimizer_sharding: true\n  recompute: selective",
    with("  ep_size: 0", "  ep_size: 0\n  pipeline_model_parallel_size: 2")));
  CHECK(c.pp_size() == 2);
  CHECK(c.train.optimizer_sharding);
  CHECK(c.train.recompute == recompute_mode::selective);
}

TEST_CASE("load_job_config names a missing file", "[unit]") {
  auto c = load_job_config("/nonexistent/tutti/job.yaml");
  REQUIRE_FALSE(c.ok());
  REQUIRE_THAT(c.message(), Contains("/nonexistent/tutti/job.yaml"));
}

TEST_CASE("unknown keys and sections are refused by name", "[unit]") {
  SECTION("typo in a model key") {
    auto msg = refusal(
      with("  hidden_size: 32", "  hidden_size: 32\n  hiden_size: 32"));
    CHECK_THAT(msg, StartsWith("model.hiden_size"));
    CHECK_THAT(msg, Contains("unknown key"));
  }
  SECTION("unknown key in cluster_config") {
    auto msg = refusal(with("  ep_size: 0", "  ep_size: 0\n  gpus: 8"));
    CHECK_THAT(msg, Contains("cluster_config.gpus"));
    CHECK_THAT(msg, Contains("unknown key"));
  }
  SECTION("unknown key in run") {
    auto msg = refusal(with("  dir: some/run", "  dir: some/run\n  name: x"));
    CHECK_THAT(msg, Contains("run.name"));
  }
  SECTION("unknown section") {
    auto msg = refusal(base + "optimizer:\n  lr: 0.1\n");
    CHECK_THAT(msg, StartsWith("optimizer"));
    CHECK_THAT(msg, Contains("unknown section"));
  }
  SECTION("misspelled section") {
    auto msg = refusal(with("moe_config:", "moe:"));
    CHECK_THAT(msg, Contains("moe"));
  }
}

TEST_CASE("values of the wrong type are refused by name", "[unit]") {
  SECTION("a string for an integer") {
    auto msg = refusal(with("  hidden_size: 32", "  hidden_size: \"abc\""));
    CHECK_THAT(msg, StartsWith("model.hidden_size"));
    CHECK_THAT(msg, Contains("integer"));
    CHECK_THAT(msg, Contains("abc"));
  }
  SECTION("a fraction for an integer") {
    auto msg = refusal(with("  hidden_size: 32", "  hidden_size: 1.5"));
    CHECK_THAT(msg, StartsWith("model.hidden_size"));
    CHECK_THAT(msg, Contains("1.5"));
  }
  SECTION("exponent notation for an integer") {
    auto msg = refusal(with("  steps: 10", "  steps: 1e3"));
    CHECK_THAT(msg, StartsWith("train.steps"));
  }
  SECTION("a negative number for the unsigned seed") {
    auto msg = refusal(with("  seq_len: 32", "  seq_len: 32\n  seed: -1"));
    CHECK_THAT(msg, StartsWith("train.seed"));
  }
  SECTION("a list for a number") {
    auto msg = refusal(
      with("  capacity_factor: 0", "  capacity_factor: [1, 2]"));
    CHECK_THAT(msg, StartsWith("moe_config.capacity_factor"));
    CHECK_THAT(msg, Contains("list"));
  }
  SECTION("a mapping for a string") {
    auto msg = refusal(with("  dir: some/run", "  dir: {a: 1}"));
    CHECK_THAT(msg, StartsWith("run.dir"));
    CHECK_THAT(msg, Contains("mapping"));
  }
  SECTION("a word for a number") {
    auto msg = refusal(with("  capacity_factor: 0", "  capacity_factor: lots"));
    CHECK_THAT(msg, StartsWith("moe_config.capacity_factor"));
    CHECK_THAT(msg, Contains("number"));
  }
  SECTION("a word for a boolean") {
    auto msg = refusal(
      with("  dir: some/data", "  dir: some/data\n  shard_per_rank: maybe"));
    CHECK_THAT(msg, StartsWith("data.shard_per_rank"));
  }
  SECTION("a section that is not a mapping") {
    auto msg = refusal(with("run:\n  dir: some/run", "run: 5"));
    CHECK_THAT(msg, StartsWith("run"));
    CHECK_THAT(msg, Contains("mapping"));
  }
}

TEST_CASE("missing required keys and sections are refused by name", "[unit]") {
  SECTION("model.hidden_size") {
    auto msg = refusal(with("  hidden_size: 32", ""));
    CHECK_THAT(msg, StartsWith("model.hidden_size"));
    CHECK_THAT(msg, Contains("missing"));
  }
  SECTION("train.steps") {
    auto msg = refusal(with("  steps: 10", ""));
    CHECK_THAT(msg, StartsWith("train.steps"));
    CHECK_THAT(msg, Contains("missing"));
  }
  SECTION("moe_config.router_top_k, given as null") {
    auto msg = refusal(with("  router_top_k: 2", "  router_top_k:"));
    CHECK_THAT(msg, StartsWith("moe_config.router_top_k"));
  }
  SECTION("data.dir given empty") {
    auto msg = refusal(with("  dir: some/data", "  dir: \"\""));
    CHECK_THAT(msg, StartsWith("data.dir"));
  }
  SECTION("the run section") {
    auto msg = refusal(with("run:\n  dir: some/run", ""));
    CHECK_THAT(msg, StartsWith("run"));
    CHECK_THAT(msg, Contains("missing section"));
  }
}

TEST_CASE("text that is not a YAML mapping is refused", "[unit]") {
  SECTION("invalid YAML") {
    auto msg = refusal("model: [1, 2\ntrain: {steps: 3\n");
    CHECK_THAT(msg, Contains("test.yaml"));
    CHECK_THAT(msg, Contains("not valid YAML"));
  }
  SECTION("bad indentation") {
    auto msg = refusal(with("  vocab_size: 32", "   vocab_size: 32"));
    CHECK_THAT(msg, Contains("test.yaml"));
  }
  SECTION("a scalar document") {
    auto msg = refusal("hello\n");
    CHECK_THAT(msg, Contains("test.yaml"));
    CHECK_THAT(msg, Contains("mapping"));
  }
  SECTION("an empty document") {
    auto msg = refusal("");
    CHECK_THAT(msg, Contains("test.yaml"));
  }
}

TEST_CASE("impossible combinations are refused by name", "[unit]") {
  SECTION("a DeepSeek-V3 without multi-head latent attention") {
    auto msg = refusal(
      with("  hidden_size: 32", "  hidden_size: 32\n  family: deepseek_v3"));
    CHECK_THAT(msg, StartsWith("model.kv_lora_rank"));
    CHECK_THAT(msg, Contains("deepseek_v3"));
  }
  SECTION("gates without renormalisation in a Mixtral") {
    auto msg = refusal(
      with("  router_top_k: 2", "  router_top_k: 2\n  norm_topk_prob: false"));
    CHECK_THAT(msg, StartsWith("moe_config.norm_topk_prob"));
    CHECK_THAT(msg, Contains("qwen3_moe"));
  }
  const auto router = [&](const std::string& keys) {
    return refusal(with("  router_top_k: 2", "  router_top_k: 2\n" + keys));
  };
  SECTION("n_group not dividing num_experts") {
    auto msg = router("  scoring_func: sigmoid\n  n_group: 3");
    CHECK(msg == "moe_config.n_group: must divide num_experts (4 % 3 != 0)");
  }
  SECTION("topk_group > n_group") {
    auto msg = router("  scoring_func: sigmoid\n  n_group: 2\n  topk_group: 3");
    CHECK(msg == "moe_config.topk_group: must be <= n_group (3 > 2)");
  }
  SECTION("router_top_k beyond the kept groups' experts") {
    auto msg = refusal(with("  router_top_k: 2",
                            "  router_top_k: 3\n  scoring_func: sigmoid\n"
                            "  n_group: 2\n  topk_group: 1"));
    CHECK(msg
          == "moe_config.router_top_k: must be <= topk_group * "
             "num_experts / n_group (3 > 2)");
  }
  SECTION("groups or a scaled gate with softmax scores") {
    CHECK_THAT(router("  n_group: 2"), StartsWith("moe_config.n_group"));
    CHECK_THAT(router("  routed_scaling_factor: 2"),
               StartsWith("moe_config.routed_scaling_factor"));
  }
  SECTION("sigmoid scores with the Switch loss or a temperature") {
    auto msg = router("  scoring_func: sigmoid\n  aux_loss_coeff: 0.01");
    CHECK_THAT(msg, StartsWith("moe_config.aux_loss_coeff"));
    CHECK_THAT(msg, Contains("bias_update_rate"));
    CHECK_THAT(router("  scoring_func: sigmoid\n  router_temperature: 0.5"),
               StartsWith("moe_config.router_temperature"));
  }
  SECTION("DeepSeek-V3's dense layers and shared experts") {
    CHECK(router("  first_k_dense_replace: 2")
          == "moe_config.first_k_dense_replace: must be < "
             "model.num_hidden_layers (2 >= 2): at least one MoE layer");
    CHECK(router("  first_k_dense_replace: 1")
          == "model.dense_intermediate_size: must be set (> 0) with "
             "moe_config.first_k_dense_replace > 0");
    CHECK_THAT(router("  n_shared_experts: -1"),
               StartsWith("moe_config.n_shared_experts"));
    const auto tp2 = with("  ep_size: 0",
                          "  ep_size: 0\n  tensor_model_parallel_size: 2");
    const auto dense = with("  hidden_size: 32",
                            "  hidden_size: 32\n  dense_intermediate_size: 33",
                            with("  router_top_k: 2",
                                 "  router_top_k: 2\n"
                                 "  first_k_dense_replace: 1",
                                 tp2));
    CHECK(refusal(dense)
          == "cluster_config.tensor_model_parallel_size: 2 must divide "
             "model.dense_intermediate_size (33): the dense layers split "
             "their MLP");
    const auto ok = parse(with("  dense_intermediate_size: 33",
                               "  dense_intermediate_size: 48", dense));
    CHECK(ok.moe.first_k_dense_replace == 1);
    CHECK(ok.model.dense_intermediate_size == 48);
    CHECK(parse(with("  router_top_k: 2",
                     "  router_top_k: 2\n  n_shared_experts: 2"))
            .moe.shared_intermediate(ok.model)
          == 128);
  }
  SECTION("an unknown scoring_func") {
    CHECK_THAT(router("  scoring_func: relu"),
               StartsWith("moe_config.scoring_func"));
  }
  SECTION("an odd head_dim") {
    auto msg = refusal(
      with("  hidden_size: 32", "  hidden_size: 32\n  head_dim: 7"));
    CHECK_THAT(msg, StartsWith("model.head_dim"));
  }
  SECTION("router_top_k > num_experts") {
    auto msg = refusal(with("  router_top_k: 2", "  router_top_k: 5"));
    CHECK_THAT(msg, StartsWith("moe_config.router_top_k"));
    CHECK_THAT(msg, Contains("num_experts"));
  }
  SECTION("pipeline stages that do not hold the layers") {
    const auto pp2 = [&](const std::string& keys) {
      return with("  ep_size: 0",
                  "  ep_size: 0\n  pipeline_model_parallel_size: 2\n" + keys);
    };
    auto msg = refusal(pp2("  pipeline_layers: [1, 1, 1]"));
    CHECK_THAT(msg, StartsWith("cluster_config.pipeline_layers: lists 3 "
                               "stages but pipeline_model_parallel_size is 2"));
    msg = refusal(pp2("  pipeline_layers: [2, 1]"));
    CHECK_THAT(msg, StartsWith("cluster_config.pipeline_layers: [2, 1] sums "
                               "to 3, but model.num_hidden_layers is 2"));
    msg = refusal(pp2("  pipeline_layers: [2, 0]"));
    CHECK_THAT(msg, Contains("every stage needs a layer"));
    msg = refusal(pp2("  pipeline_first_stage_layers: 3"));
    CHECK_THAT(msg, StartsWith("cluster_config.pipeline_first_stage_layers"));
    msg = refusal(with("  ep_size: 0", "  ep_size: 0\n"
                                       "  pipeline_last_stage_layers: 1"));
    CHECK_THAT(msg, StartsWith("cluster_config.pipeline_last_stage_layers: "
                               "needs pipeline_model_parallel_size > 1"));
    // Accepted: a list, and first/last counts with equal stages between.
    const auto listed = parse(pp2("  pipeline_layers: [1, 1]"));
    CHECK(listed.stage_layer_counts() == std::vector<int64_t>{1, 1});
    const auto five = with("  num_hidden_layers: 2", "  num_hidden_layers: 5");
    const auto pp3 = [&](const std::string& keys) {
      return with("  world_size: 2", "  world_size: 3",
                  with("  nproc_per_node: 2", "  nproc_per_node: 3",
                       with("  global_batch_size: 8", "  global_batch_size: 9",
                            with("  ep_size: 0",
                                 "  ep_size: 1\n"
                                 "  pipeline_model_parallel_size: 3\n"
                                   + keys,
                                 five))));
    };
    CHECK(parse(pp3("  pipeline_first_stage_layers: 1")).stage_layer_counts()
          == std::vector<int64_t>{1, 2, 2});
    CHECK(parse(pp3("  pipeline_last_stage_layers: 3")).stage_layer_counts()
          == std::vector<int64_t>{1, 1, 3});
    msg = refusal(pp3(""));
    CHECK_THAT(msg, Contains("cluster_config.pipeline_layers lists uneven "
                             "stages"));
  }
  SECTION("bf16 master weights under fp32 parameters") {
    auto msg = refusal(with("  seq_len: 32", "  seq_len: 32\n"
                                             "  precision: {master_weights: "
                                             "bf16}"));
    CHECK_THAT(msg, StartsWith("train.precision.master_weights"));
    const auto mixed = parse(with(
      "  seq_len: 32", "  seq_len: 32\n  precision: {params: bf16, grads: "
                       "bf16, moments: bf16}"));
    CHECK(mixed.train.precision.params == storage_dtype::bf16);
    CHECK(mixed.train.precision.master_weights == storage_dtype::fp32);
  }
  SECTION("world_size != nnodes * nproc_per_node") {
    auto msg = refusal(with("  world_size: 2", "  world_size: 4"));
    CHECK_THAT(msg, StartsWith("cluster_config.world_size"));
    CHECK_THAT(msg, Contains("nnodes"));
  }
  SECTION("num_experts not divisible by ep_size") {
    auto yaml = with("  num_experts: 4", "  num_experts: 3");
    yaml = with("  router_top_k: 2", "  router_top_k: 1", yaml);
    yaml = with("  ep_size: 0", "  ep_size: 2", yaml);
    auto msg = refusal(yaml);
    CHECK_THAT(msg, StartsWith("moe_config.num_experts"));
    CHECK_THAT(msg, Contains("ep_size"));
  }
  SECTION("ep_size that does not divide world_size") {
    auto yaml = with("  world_size: 2\n  nnodes: 1\n  nproc_per_node: 2\n"
                     "  ep_size: 0",
                     "  world_size: 4\n  nnodes: 1\n  nproc_per_node: 4\n"
                     "  ep_size: 3");
    auto msg = refusal(yaml);
    CHECK_THAT(msg, StartsWith("cluster_config.ep_size"));
  }
  SECTION("a device other than cpu or cuda") {
    auto msg = refusal(
      with("  world_size: 2", "  world_size: 2\n  device: tpu"));
    CHECK_THAT(msg, StartsWith("cluster_config.device"));
    CHECK_THAT(msg, Contains("tpu"));
  }
  SECTION("no combine chunks") {
    auto msg = refusal(with("  capacity_factor: 0",
                            "  capacity_factor: 0\n  combine_chunks: 0"));
    CHECK_THAT(msg, StartsWith("moe_config.combine_chunks"));
  }
  SECTION("nccl on the CPU") {
    auto msg = refusal(with("  world_size: 2",
                            "  world_size: 2\n  communication_backend: nccl"));
    CHECK_THAT(msg, StartsWith("cluster_config.communication_backend"));
    CHECK_THAT(msg, Contains("device: cuda"));
  }
  SECTION("num_attention_heads not a multiple of num_key_value_heads") {
    auto msg = refusal(
      with("  num_key_value_heads: 2", "  num_key_value_heads: 3"));
    CHECK_THAT(msg, StartsWith("model.num_attention_heads"));
    CHECK_THAT(msg, Contains("num_key_value_heads"));
  }
  SECTION("hidden_size not a multiple of num_attention_heads") {
    auto msg = refusal(with("  hidden_size: 32", "  hidden_size: 30"));
    CHECK_THAT(msg, StartsWith("model.hidden_size"));
  }
  SECTION("odd head dimension") {
    // 36 / 4 = 9: rotary embedding needs pairs.
    auto msg = refusal(with("  hidden_size: 32", "  hidden_size: 36"));
    CHECK_THAT(msg, StartsWith("model.hidden_size"));
    CHECK_THAT(msg, Contains("even"));
  }
  SECTION("tensor parallelism not dividing world_size") {
    auto msg = refusal(
      with("  ep_size: 0", "  ep_size: 0\n  tensor_model_parallel_size: 3"));
    CHECK_THAT(msg, StartsWith("cluster_config.tensor_model_parallel_size"));
  }
  SECTION("tensor parallelism over more heads than the model has") {
    auto msg = refusal(with(
      "  num_key_value_heads: 2", "  num_key_value_heads: 1",
      with("  ep_size: 0", "  ep_size: 0\n  tensor_model_parallel_size: 2")));
    CHECK_THAT(msg, StartsWith("cluster_config.tensor_model_parallel_size"));
    CHECK_THAT(msg, Contains("num_key_value_heads"));
  }
  SECTION("pipeline parallelism with rack affinity") {
    auto msg = refusal(with(
      "  capacity_factor: 0", "  capacity_factor: 0\n  placement: plan.json",
      with("  ep_size: 0", "  ep_size: 0\n  pipeline_model_parallel_size: 2",
           with("  dir: some/data", "  dir: some/data\n  rack_affinity: true"))));
    CHECK_THAT(msg, StartsWith("cluster_config.pipeline_model_parallel_size"));
    CHECK_THAT(msg, Contains("data.rack_affinity"));
  }
  SECTION("pipeline stages that do not split the layers") {
    auto msg = refusal(with(
      "  num_hidden_layers: 2", "  num_hidden_layers: 3",
      with("  ep_size: 0", "  ep_size: 0\n  pipeline_model_parallel_size: 2")));
    CHECK_THAT(msg, StartsWith("cluster_config.pipeline_model_parallel_size"));
    CHECK_THAT(msg, Contains("num_hidden_layers"));
  }
  SECTION("global_batch_size not divisible by world_size") {
    auto msg = refusal(
      with("  global_batch_size: 8", "  global_batch_size: 7"));
    CHECK_THAT(msg, StartsWith("train.global_batch_size"));
    CHECK_THAT(msg, Contains("world_size"));
  }
  SECTION("eval_sequences not divisible by world_size") {
    auto msg = refusal(
      with("  seq_len: 32", "  seq_len: 32\n  eval_sequences: 3"));
    CHECK_THAT(msg, StartsWith("train.eval_sequences"));
  }
  SECTION("negative capacity_factor") {
    auto msg = refusal(with("  capacity_factor: 0", "  capacity_factor: -0.5"));
    CHECK_THAT(msg, StartsWith("moe_config.capacity_factor"));
  }
  SECTION("NaN capacity_factor") {
    auto msg = refusal(with("  capacity_factor: 0", "  capacity_factor: .nan"));
    CHECK_THAT(msg, StartsWith("moe_config.capacity_factor"));
  }
  SECTION("seq_len > max_seq_len") {
    auto msg = refusal(with("  seq_len: 32", "  seq_len: 33"));
    CHECK_THAT(msg, StartsWith("train.seq_len"));
    CHECK_THAT(msg, Contains("max_seq_len"));
  }
  SECTION("min_lr above lr") {
    auto msg = refusal(
      with("  seq_len: 32", "  seq_len: 32\n  lr: 0.001\n  min_lr: 0.01"));
    CHECK_THAT(msg, StartsWith("train.min_lr"));
  }
  SECTION("zero steps") {
    auto msg = refusal(with("  steps: 10", "  steps: 0"));
    CHECK_THAT(msg, StartsWith("train.steps"));
  }
  SECTION("zero log_interval") {
    auto msg = refusal(
      with("  seq_len: 32", "  seq_len: 32\n  log_interval: 0"));
    CHECK_THAT(msg, StartsWith("train.log_interval"));
  }
  SECTION("beta2 of 1") {
    auto msg = refusal(with("  seq_len: 32", "  seq_len: 32\n  beta2: 1"));
    CHECK_THAT(msg, StartsWith("train.beta2"));
  }
}

TEST_CASE("bf16 GEMMs are a CPU setting too", "[unit]") {
  // oneDNN runs them where the CPU has bf16 units, float32 elsewhere.
  const auto c =
    parse(with("  seq_len: 32", "  seq_len: 32\n  gemm_precision: bf16"));
  CHECK(c.cluster.device == compute_device::cpu);
  CHECK(c.train.gemm_precision == gemm_precision::bf16);
}
