#pragma once
// Gloo (TCP) implementation of the communicator. Rendezvous goes through a
// gloo::rendezvous::Store supplied by the caller: in tutti, one served by
// the coordinator actor, so no shared file system is needed.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tutti/comm/communicator.hpp"

namespace gloo::rendezvous {
class Store;
}

namespace tutti::comm {

struct gloo_options {
  std::string host = "127.0.0.1";           // interface to bind
  std::string group = "world";              // key prefix for rendezvous
  std::chrono::milliseconds timeout{60000}; // each collective
  std::chrono::milliseconds connect_timeout{120000}; // rendezvous
  // The cluster's node addresses: once connected, a connection to this
  // member's Gloo listener from any other address fails the communicator
  // (data_plane_peers.hpp). Empty: not checked.
  std::vector<std::string> members;
};

// Connects `size` members through `store`; blocks until all have joined or
// the timeout passes. The store must outlive the call only.
status make_gloo_communicator(gloo::rendezvous::Store& store, int rank,
                              int size, const gloo_options& options,
                              std::unique_ptr<communicator>& out);

} // namespace tutti::comm
