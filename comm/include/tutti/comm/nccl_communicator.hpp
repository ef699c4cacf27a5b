#pragma once
// NCCL implementation of the communicator, for ranks on GPUs.
//
// Rendezvous: rank 0 makes the NCCL unique id and publishes it through the
// same gloo::rendezvous::Store that Gloo uses (in tutti, served by the
// coordinator actor), under "<group>/nccl_unique_id"; the others wait for
// it. Put the membership epoch in `group` so a rebuilt communicator never
// reads the id of the one it replaces.
//
// Buffers: device pointers are used in place; host pointers (e.g. expert
// counts) are staged through a device buffer, so the Gloo-style host
// callers work unchanged. Every call blocks until its collective is done
// (like Gloo), polling the stream and NCCL's async error, so a dead peer
// ends in a timeout error rather than a hang, and abort() can cut it short.
//
// Built only with the CUDA backend and NCCL headers; elsewhere
// make_nccl_communicator returns an error saying so.

#include <chrono>
#include <memory>
#include <string>

#include "tutti/comm/communicator.hpp"

namespace gloo::rendezvous {
class Store;
}

namespace tutti::comm {

struct nccl_options {
  std::string group = "world"; // key prefix for the unique id
  int device = -1;             // CUDA device; -1: the current
  // cudaStream_t to run the collectives on, e.g. the rank's compute stream,
  // so they are ordered after the kernels that produced the data. nullptr:
  // the communicator makes its own (then the caller must have synchronized
  // the producers of the data it passes).
  void* stream = nullptr;
  std::chrono::milliseconds timeout{60000}; // rendezvous and each collective
  std::chrono::microseconds poll{50};       // sleep between progress polls
};

// The NCCL communicator's abort() is ncclCommAbort: it unblocks a
// collective stuck on a dead peer from another thread.
class nccl_communicator : public communicator {};

// Ok when tutti was built with NCCL; otherwise says what is missing.
status nccl_built();

// Connects `size` members through `store`; blocks until all have joined or
// the timeout passes. Fails with a clear error where no GPU answers.
status make_nccl_communicator(gloo::rendezvous::Store& store, int rank,
                              int size, const nccl_options& options,
                              std::unique_ptr<nccl_communicator>& out);

} // namespace tutti::comm
