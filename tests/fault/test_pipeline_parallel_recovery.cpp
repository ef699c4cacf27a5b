// Recovery of a pipeline-parallel job (label fault), on two daemons with
// the stage outermost, so node 0 runs stage 0 and node 1 stage 1: every
// stage-to-stage exchange and the sums over the stages go over Gloo.
// - (PP2·DP2), ranks 0, 1 (stage 0) on node 0 and 2, 3 (stage 1) on node
//   1: node 1's daemon is killed with SIGKILL (its ranks die mid-step,
//   stage 0 blocks in an exchange with them) and started again.
// - (PP2), one rank per daemon: rank 1, the last stage, crashes (chaos
//   kill_rank).
// - (TP2·PP2), ranks 0, 1 (stage 0, TP indices 0 and 1) on node 0 and 2,
//   3 (stage 1) on node 1: node 1's daemon is killed with SIGKILL, so
//   both TP ranks of the last stage die at once, and started again; and
//   rank 1 (stage 0, TP index 1) crashes (chaos kill_rank).
// - (TP2·PP2·DP2) with the distributed optimizer and full recomputation,
//   4 ranks a daemon: node 0 holds stage 0 (its two TP groups), node 1
//   stage 1; node 1's daemon is killed with SIGKILL and started again.
// - (PP2·DP2) with interleaved stages (4 layers, 2 chunks a stage): node
//   1's daemon is killed with SIGKILL and started again.
// - (PP2·DP2) with train.keep_expert_activations: a stage-0 expert shard
//   killed restarts in place (no checkpoint recovery), its micro-batches'
//   saved forwards rebuilt by the replay.
// Each job has 2 micro-batches a step (1F1B) and recovers from its
// checkpoint with the losses of the fault-free run of the same config
// (`tutti run`, one process), bit for bit: a two-member sum is the same
// bits in either transport.

#include <catch2/catch.hpp>

#include "fault_support.hpp"

using namespace tutti::testing;

TEST_CASE("a killed daemon of a PP2 job rejoins and training resumes with "
          "the fault-free losses",
          "[pp_node_loss]") {
  fault_job job("fault_pp_node_loss", 120, 105);
  // PP2·DP2: node 1's daemon holds both ranks of stage 1.
  make_model_parallel(job, 4, "pipeline_model_parallel_size",
                      "  micro_batches: 2\n");
  check_node1_kill_recovers(job);
}

TEST_CASE("a killed daemon of an interleaved PP2 job rejoins and training "
          "resumes with the fault-free losses",
          "[pp_interleaved_node_loss]") {
  fault_job job("fault_pp_interleaved_node_loss", 120, 115);
  // PP2·DP2 with 4 layers in 2 chunks a stage: stage 1's sends go back to
  // stage 0 over Gloo, point to point.
  make_model_parallel(job, 4, "pipeline_model_parallel_size",
                      "  micro_batches: 2\n");
  for (const auto& file : {job.config, job.dir / "reference.yaml"}) {
    auto text = read_text(file);
    text = replace_once(text, "  num_hidden_layers: 2\n",
                        "  num_hidden_layers: 4\n");
    text = replace_once(text, "  pipeline_model_parallel_size: 2\n",
                        "  pipeline_model_parallel_size: 2\n"
                        "  pipeline_virtual_stages: 2\n");
    write_text(file, text);
  }
  check_node1_kill_recovers(job);
}

TEST_CASE("an expert shard killed under PP with the experts' activations "
          "kept restarts in place with the fault-free losses",
          "[pp_expert_restart_keep]") {
  fault_job job("fault_pp_expert_restart_keep", 120, 117);
  // PP2·DP2, 2 micro-batches in flight on stage 0, each with its own saved
  // expert forward: the restarted shard gets them back from the replay.
  make_model_parallel(job, 4, "pipeline_model_parallel_size",
                      "  micro_batches: 2\n  keep_expert_activations: true\n");
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(5, 30);
  job.inject("kill_expert --rank 1"); // stage 0, data-parallel index 1
  fault_job::check_finished(nodes);
  auto log = job.node_logs();
  INFO(log);
  CHECK(log.find("restarted in place") != std::string::npos);
  CHECK(log.find("recovered: epoch") == std::string::npos);
  job.check_losses();
}

TEST_CASE("a PP2 rank killed in its daemon recovers from the checkpoint",
          "[pp_rank_kill]") {
  fault_job job("fault_pp_rank_kill", 120, 107);
  // PP2: rank 1, node 1's only rank, is the last stage, fed by node 0's.
  make_model_parallel(job, 2, "pipeline_model_parallel_size",
                      "  micro_batches: 2\n");
  check_rank1_kill_recovers(job);
}

namespace {

// (TP2·PP2) on the two daemons, 2 micro-batches: stages outermost, so
// node 0 holds stage 0's two TP ranks (0, 1) and node 1 stage 1's (2, 3).
void make_tp2_pp2(const fault_job& job) {
  make_model_parallel(job, 4, "tensor_model_parallel_size",
                      "  micro_batches: 2\n");
  for (const auto& file : {job.config, job.dir / "reference.yaml"}) {
    auto text = read_text(file);
    const std::string from = "  ep_size: 2\n  tensor_model_parallel_size: 2\n";
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(),
                 "  ep_size: 1\n  tensor_model_parallel_size: 2\n"
                 "  pipeline_model_parallel_size: 2\n");
    write_text(file, text);
  }
}

} // namespace

TEST_CASE("a killed daemon of a TP2·PP2 job rejoins and training resumes "
          "with the fault-free losses",
          "[tp_pp_node_loss]") {
  fault_job job("fault_tp_pp_node_loss", 120, 109);
  make_tp2_pp2(job); // node 1's SIGKILL takes both TP ranks of stage 1
  check_node1_kill_recovers(job);
}

TEST_CASE("a TP2·PP2 rank killed in its daemon recovers from the checkpoint",
          "[tp_pp_rank_kill]") {
  fault_job job("fault_tp_pp_rank_kill", 120, 111);
  make_tp2_pp2(job); // rank 1: stage 0, TP index 1; its TP partner beside it
  check_rank1_kill_recovers(job);
}

TEST_CASE("a killed daemon of a TP2·PP2·DP2 job with the distributed "
          "optimizer and recomputation resumes with the fault-free losses",
          "[tp_pp_dp_node_loss]") {
  fault_job job("fault_tp_pp_dp_node_loss", 120, 113);
  make_model_parallel(job, 4, "tensor_model_parallel_size",
                      "  micro_batches: 2\n  optimizer_sharding: true\n"
                      "  recompute: full\n");
  for (const auto& file : {job.config, job.dir / "reference.yaml"}) {
    auto text = read_text(file);
    for (auto [from, to] :
         {std::pair<std::string, std::string>{
            "  tensor_model_parallel_size: 2\n",
            "  tensor_model_parallel_size: 2\n"
            "  pipeline_model_parallel_size: 2\n"},
          {"  world_size: 4\n", "  world_size: 8\n"},
          {"  nproc_per_node: 2\n", "  nproc_per_node: 4\n"}}) {
      const auto at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, from.size(), to);
    }
    write_text(file, text);
  }
  check_node1_kill_recovers(job);
}
