#pragma once
// The communicator of ranks that share a process (every rank of `tutti
// run`, the ranks of one node under `tuttid`): collectives are copies and
// sums in this process's memory, with no sockets and no serialisation. Gloo
// stays for groups that cross processes.
//
// Members meet in a memory_hub, one per process, under the group's name
// (which carries the membership epoch, as Gloo's rendezvous keys do). Each
// collective publishes the members' buffers, waits until all have, lets
// every member read what it needs directly from its peers' buffers, and
// waits again before anyone may reuse them.
//
// Sums are taken in member order (member 0's value, plus member 1's, ...),
// the order gloo_communicator uses too, so a job gives the same bits
// whether a group runs in one process or across several.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tutti/comm/communicator.hpp"

namespace tutti::comm {

class memory_group;

// Where the ranks of one process find each other. Also records which
// global ranks live in this process, so a group can tell whether all its
// members are here.
class memory_hub {
public:
  memory_hub(int first_rank, int rank_count)
    : first_rank_(first_rank), rank_count_(rank_count) {}

  bool hosts(int global_rank) const {
    return global_rank >= first_rank_
           && global_rank < first_rank_ + rank_count_;
  }
  int first_rank() const { return first_rank_; }
  int rank_count() const { return rank_count_; }

  // Joins group `name` as `member` of `size`; returns once all members
  // have joined, or an error at the deadline.
  status join(const std::string& name, int member, int size,
              std::chrono::milliseconds timeout,
              std::shared_ptr<memory_group>& out);

private:
  int first_rank_ = 0, rank_count_ = 0;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<memory_group>> forming_;
};

struct memory_options {
  std::string group = "world";                       // name in the hub
  std::chrono::milliseconds timeout{60000};          // each collective
  std::chrono::milliseconds connect_timeout{120000}; // all members joining
  // Called over and over while this member waits for the others to arrive:
  // runs one piece of other work of the process (an expert tile of a busy
  // shard, model/idle_core_pool.hpp), sets its seconds and returns true, or
  // returns false when there is none (the member then sleeps a little).
  // The time it ran counts as lent_s(), not as waiting.
  std::function<bool(double& ran_s)> while_waiting = nullptr;
};

status make_memory_communicator(memory_hub& hub, int rank, int size,
                                const memory_options& options,
                                std::unique_ptr<communicator>& out);

} // namespace tutti::comm
