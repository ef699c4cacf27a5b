#pragma once
// What a rank sets up before its first step: the device it computes on and
// its communicators (rank.cpp drives the steps).

#include <memory>

#include "rank/rank_actor.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/train/rank_model.hpp"

namespace caf {
class actor_system;
}

namespace tutti {

// The communicators of one rank: world; with tensor parallelism its
// data-parallel group (the dp_size consecutive ranks of its TP index) and
// its TP group (the ranks of its dp index, dp_size apart); its EP group (a
// block of ep_size consecutive ranks) and its expert-data-parallel group
// (the ranks of its TP index that hold the same experts); with pipeline
// parallelism all of these are within the rank's stage, and pp/prev/next
// connect the stages (TP index and dp index kept).
struct rank_comms {
  std::unique_ptr<comm::communicator> world, dp, tp, ep, expert_dp;
  // Pipeline parallelism: the stages of this rank's TP and dp index, and the
  // links to the stage before and after (null at the ends).
  std::unique_ptr<comm::communicator> pp, prev, next;
  // In-memory replicas across nodes (elastic.replica_interval_steps): to
  // the rank keeping this rank's copy and from the rank whose copy this
  // one keeps, two-member links over host memory whatever the backend,
  // used by the copy's own thread beside the step's collectives.
  std::unique_ptr<comm::communicator> replica_out, replica_in;

  train::comm_groups groups() const {
    auto* data = dp ? dp.get() : world.get();
    return {data,     ep ? ep.get() : data, expert_dp.get(), tp.get(),
            pp.get(), prev.get(),           next.get()};
  }
};

// Rendezvous through the coordinator's store; Gloo or NCCL by the config,
// on CUDA `device` for NCCL. Each communicator is registered with the
// rank's control (abort) as soon as it exists.
status connect(caf::actor_system& sys, const rank_args& a, int device,
               rank_comms& out);

} // namespace tutti
