// Recovery of a tensor-parallel job (label fault), on two daemons.
// - (TP2·DP2), TP innermost: node 0 runs data-parallel index 0's TP group
//   (ranks 0, 1), node 1 index 1's (ranks 2, 3), so the EP and data-
//   parallel groups span the daemons over Gloo. Node 1's daemon is killed
//   with SIGKILL (a whole TP group dies mid-step, its partners on node 0
//   block in the MoE exchange) and started again.
// - (TP2), one rank per daemon, so the TP group spans them and its
//   all-reduces go over Gloo: rank 1 crashes (chaos kill_rank); its TP
//   partner is on node 0.
// Each job recovers from its checkpoint with the losses of the fault-free
// run of the same config (`tutti run`, one process), bit for bit: a
// two-member sum is the same bits in either transport.

#include <catch2/catch.hpp>

#include "fault_support.hpp"

using namespace tutti::testing;

TEST_CASE("a killed daemon of a TP2 job rejoins and training resumes with "
          "the fault-free losses",
          "[tp_node_loss]") {
  fault_job job("fault_tp_node_loss", 120, 101);
  make_model_parallel(job, 4, "tensor_model_parallel_size");
  check_node1_kill_recovers(job);
}

TEST_CASE("a TP2 rank killed in its daemon recovers from the checkpoint",
          "[tp_rank_kill]") {
  fault_job job("fault_tp_rank_kill", 120, 103);
  make_model_parallel(job, 2, "tensor_model_parallel_size");
  check_rank1_kill_recovers(job);
}
