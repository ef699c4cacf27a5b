#pragma once
// What a rank sets up before its first step: the device it computes on and
// its communicators (rank.cpp drives the steps).

#include <memory>

#include "rank/rank_actor.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/model/rank_model.hpp"

namespace caf {
class actor_system;
}

namespace tutti {

// The communicators of one rank: world, its EP group (a block of ep_size
// consecutive ranks) and its expert-data-parallel group (the ranks that
// hold the same experts).
struct rank_comms {
  std::unique_ptr<comm::communicator> world, ep, expert_dp;

  model::comm_groups groups() const {
    return {world.get(), ep ? ep.get() : world.get(), expert_dp.get()};
  }
};

// Rendezvous through the coordinator's store; Gloo or NCCL by the config,
// on CUDA `device` for NCCL. Each communicator is registered with the
// rank's control (abort) as soon as it exists.
status connect(caf::actor_system& sys, const rank_args& a, int device,
               rank_comms& out);

} // namespace tutti
