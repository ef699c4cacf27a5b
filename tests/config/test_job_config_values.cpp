// config/: the job config's values past its model and layout: malformed
// YAML structure and numbers, the supervision, recovery and alert
// sections, and the enum keys. Each refusal is one line naming the key.

#include <catch2/catch.hpp>

#include <string>

#include "tutti/config/job_config.hpp"

#include "config_test_support.hpp"

using namespace tutti;
using namespace tutti::testing::config;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

// Refusals of malformed YAML structure and numbers.

TEST_CASE("a non-scalar key is refused", "[config]") {
  auto msg = refusal(with("  hidden_size: 32", "  ? [x]\n  : 3\n"
                                               "  hidden_size: 32"));
  CHECK_THAT(msg, StartsWith("model"));
}

TEST_CASE("a duplicate key is refused", "[config]") {
  auto msg = refusal(
    with("  hidden_size: 32", "  hidden_size: 32\n  hidden_size: 48"));
  CHECK_THAT(msg, StartsWith("model.hidden_size"));
}

TEST_CASE("non-finite numbers are refused", "[config]") {
  CHECK_THAT(refusal(with("  capacity_factor: 0", "  capacity_factor: .inf")),
             StartsWith("moe_config.capacity_factor"));
  CHECK_THAT(refusal(with("  seq_len: 32", "  seq_len: 32\n  lr: .inf")),
             StartsWith("train.lr"));
}

TEST_CASE("nnodes * nproc_per_node overflow is refused", "[config]") {
  // 4611686018427387905 * 4 wraps to 4 in 64 bits.
  auto msg = refusal(with("  world_size: 2\n  nnodes: 1\n  nproc_per_node: 2",
                          "  world_size: 4\n  nnodes: 4611686018427387905\n"
                          "  nproc_per_node: 4"));
  CHECK_THAT(msg, StartsWith("cluster_config"));
}

TEST_CASE("supervision and recovery: defaults, values, refusals", "[config]") {
  SECTION("documented defaults") {
    auto c = parse(base);
    CHECK(c.supervision.expert_shard.strategy == restart_strategy::one_for_one);
    CHECK(c.supervision.expert_shard.restart == restart_type::permanent);
    CHECK(c.supervision.expert_shard.max_restarts == 3);
    CHECK(c.supervision.checkpoint_writer.period_s == 60);
    CHECK(c.recovery.heartbeat_interval_ms == 1000);
    CHECK(c.recovery.heartbeat_timeout_ms == 10000);
    CHECK(c.recovery.rendezvous_timeout_ms == 120000);
    CHECK(c.recovery.max_wait_s == 600);
  }
  SECTION("per child kind") {
    auto c = parse(base
                   + "supervision:\n  expert_shard:\n    strategy: "
                     "one_for_one\n    restart: transient\n    max_restarts: "
                     "7\n    period_s: 2.5\n  data_loader:\n    strategy: "
                     "one_for_all\n");
    CHECK(c.supervision.data_loader.strategy == restart_strategy::one_for_all);
    CHECK(c.supervision.expert_shard.restart == restart_type::transient);
    CHECK(c.supervision.expert_shard.max_restarts == 7);
    CHECK(c.supervision.expert_shard.period_s == 2.5);
    CHECK(c.supervision.checkpoint_writer.strategy
          == restart_strategy::one_for_one);
  }
  SECTION("an unknown strategy is named") {
    auto msg = refusal(base
                       + "supervision:\n  data_loader:\n    strategy: "
                         "all_for_one\n");
    CHECK_THAT(msg, StartsWith("supervision.data_loader.strategy"));
    CHECK_THAT(msg, Contains("all_for_one"));
  }
  SECTION("expert shards restart one by one") {
    auto msg = refusal(base
                       + "supervision:\n  expert_shard:\n    strategy: "
                         "rest_for_one\n");
    CHECK_THAT(msg, StartsWith("supervision.expert_shard.strategy"));
  }
  SECTION("an unknown child kind is named") {
    auto msg = refusal(base
                       + "supervision:\n  rank:\n    restart: permanent\n");
    CHECK_THAT(msg, StartsWith("supervision.rank"));
  }
  SECTION("timeouts out of order are refused") {
    auto msg = refusal(base + "recovery:\n  heartbeat_timeout_ms: 90000\n");
    CHECK_THAT(msg, StartsWith("recovery.heartbeat_timeout_ms"));
    CHECK_THAT(msg, Contains("heartbeat < collective < rendezvous"));
    msg = refusal(base + "recovery:\n  rendezvous_timeout_ms: 1000\n");
    CHECK_THAT(msg, StartsWith("recovery.rendezvous_timeout_ms"));
    msg = refusal(base + "recovery:\n  heartbeat_interval_ms: 20000\n");
    CHECK_THAT(msg, StartsWith("recovery.heartbeat_timeout_ms"));
  }
}

TEST_CASE("alert timing: defaults, values, refusals", "[config]") {
  auto c = parse(base);
  CHECK(c.alerts.hold_steps == 3);
  CHECK(c.alerts.clear_steps == 10);
  CHECK(c.alerts.flap_firings == 4);
  CHECK(c.alerts.flap_window_steps == 200);
  c = parse(base + "alerts:\n  hold_steps: 1\n  flap_firings: 0\n");
  CHECK(c.alerts.hold_steps == 1);
  CHECK(c.alerts.flap_firings == 0);
  for (const char* bad : {"hold_steps: 0", "clear_steps: -1",
                          "flap_firings: -2", "flap_window_steps: 0"}) {
    INFO(bad);
    auto msg = refusal(base + "alerts:\n  " + bad + "\n");
    const std::string key(bad, std::string(bad).find(':'));
    CHECK_THAT(msg, StartsWith("alerts." + key + ": must be >= "));
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("enum keys take only their names", "[unit]") {
  SECTION("train.gemm_precision") {
    auto msg = refusal(
      with("  seq_len: 32", "  seq_len: 32\n  gemm_precision: fp16"));
    CHECK(msg == "train.gemm_precision: must be fp32 or bf16, got 'fp16'");
  }
  SECTION("diag.on_start") {
    auto msg = refusal(base + "diag:\n  on_start: sometimes\n");
    CHECK(msg == "diag.on_start: must be off, warn or refuse, got 'sometimes'");
  }
  SECTION("moe_config.all_to_all_communication") {
    auto msg = refusal(with("  capacity_factor: 0",
                            "  capacity_factor: 0\n"
                            "  all_to_all_communication: maybe"));
    CHECK(msg
          == "moe_config.all_to_all_communication: must be enabled or "
             "disabled, got 'maybe'");
  }
  SECTION("supervision restart type") {
    auto msg = refusal(base
                       + "supervision:\n  checkpoint_writer:\n    restart: "
                         "always\n");
    CHECK(msg
          == "supervision.checkpoint_writer.restart: must be permanent, "
             "transient or temporary, got 'always'");
  }
  SECTION("a list for an enum") {
    auto msg = refusal(
      with("  world_size: 2", "  world_size: 2\n  device: [cpu]"));
    CHECK(msg == "cluster_config.device: expected cpu or cuda, got a list");
  }
  SECTION("names are exact") {
    auto msg = refusal(
      with("  world_size: 2", "  world_size: 2\n  device: CPU"));
    CHECK_THAT(msg, StartsWith("cluster_config.device"));
  }
  SECTION("to_string and from_string are each other's inverse") {
    CHECK(std::string(to_string(restart_strategy::rest_for_one))
          == "rest_for_one");
    CHECK(from_string<preflight_check>("warn") == preflight_check::warn);
    CHECK_FALSE(from_string<compute_device>("tpu").has_value());
    CHECK(enum_choices<gemm_precision>() == "fp32 or bf16");
  }
}

TEST_CASE("an unknown communication backend is kept for the plan", "[unit]") {
  // `tutti plan` works on the users' own backend name; a job start refuses
  // it (check_rank_device), naming it: the text must survive.
  auto c = parse(with("  world_size: 2",
                      "  world_size: 2\n"
                      "  communication_backend: custom_high_speed"));
  CHECK(c.cluster.communication_backend == "custom_high_speed");
  CHECK(c.cluster.backend() == backend_kind::other);
  auto msg = refusal(
    with("  world_size: 2", "  world_size: 2\n  communication_backend: \"\""));
  CHECK(msg == "cluster_config.communication_backend: must not be empty");
}
