#pragma once
// The data-plane communicator: the collectives an MoE step needs, on raw
// pointers. Gloo implements it on CPU (TCP), NCCL on GPU. Tensors never
// travel as actor messages between nodes; they travel through this.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/comm/slices.hpp"

namespace tutti::comm {

class communicator {
public:
  virtual ~communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum over all members. Every member gets the same bits; in
  // which order the members' values are added is the transport's (see
  // sums_in_member_order).
  virtual status all_reduce_sum(float* data, size_t count) = 0;
  virtual status all_reduce_sum(double* data, size_t count) = 0;
  virtual status all_reduce_sum(int64_t* data, size_t count) = 0;

  // Each member sends send_counts[p] elements to member p and receives
  // recv_counts[p] elements from it; blocks are packed in member order.
  virtual status all_to_all_v(const void* send,
                              const std::vector<int64_t>& send_counts,
                              void* recv,
                              const std::vector<int64_t>& recv_counts,
                              size_t element_bytes) = 0;

  // all_to_all_v whose blocks are read from, and land in, runs of elements
  // (slice: first, count) instead of packed blocks: what member p sends to
  // q is p's send_runs[q] in order, and it lands in q's recv_runs[p] in
  // order (the totals must agree). It spares the MoE block the copies that
  // regroup rows by expert around a packed exchange. Only in-process
  // communicators have it (in_process()); the others return an error.
  virtual status all_to_all_runs(
    const void* /*send*/,
    const std::vector<std::vector<slice>>& /*send_runs*/, void* /*recv*/,
    const std::vector<std::vector<slice>>& /*recv_runs*/,
    size_t /*element_bytes*/) {
    return status::error(describe() + ": no exchange by runs");
  }

  // Fixed-size exchange: `per_member` int64 values to and from each member.
  virtual status all_to_all(const int64_t* send, int64_t* recv,
                            size_t per_member) = 0;

  virtual status barrier() = 0;

  // Point-to-point, for the interleaved pipeline's activations and
  // gradients, whose order of sends and receives differs between members:
  // send() hands `bytes` at `data` to member `peer` under `tag` and returns
  // without waiting for the receiver (`data` stays untouched until
  // wait_sends() returns); recv() waits for what `peer` sent under `tag`
  // (the sizes must agree). A tag names one message between two members
  // until it is received. The collectives' timeout bounds every wait.
  virtual status send(int /*peer*/, uint32_t /*tag*/, const void* /*data*/,
                      size_t /*bytes*/) {
    return status::error(describe() + ": no point-to-point sends");
  }
  virtual status recv(int /*peer*/, uint32_t /*tag*/, void* /*data*/,
                      size_t /*bytes*/) {
    return status::error(describe() + ": no point-to-point sends");
  }
  // Waits until every message this member sent has been received.
  virtual status wait_sends() { return {}; }

  // Ends every collective in flight on this member at once, from any
  // thread: each returns an error, and so do all later calls. Peers waiting
  // on this member fail too instead of waiting for their timeout. Recovery
  // then builds a new communicator (new group, new epoch).
  virtual status abort() = 0;

  // True when the data pointers may be device memory (NCCL: in place);
  // false when they must be host memory (Gloo): callers holding device
  // tensors stage them through the host (model/staged_collectives.hpp).
  virtual bool takes_device_memory() const { return false; }

  // True when all_reduce_sum adds member 0's value, plus member 1's, ...
  // (Gloo and in-memory groups): the order of a reduce-scatter built from
  // all_to_all_v (moe::staged_collectives), so both give the same bits.
  // False where the transport picks its own order (NCCL: ring or tree, by
  // size and topology), and by default.
  virtual bool sums_in_member_order() const { return false; }

  // True when every collective is copies made by the calling threads in
  // this process (memory_communicator): no transfer runs beside the
  // computation, so there is nothing for a pipelined exchange to hide.
  virtual bool in_process() const { return false; }
  // Seconds this member has spent in collectives waiting for the others to
  // arrive: the price of their being late (uneven work), not of moving data.
  // Cumulative; 0 where the transport cannot tell the two apart (Gloo).
  virtual double waited_s() const { return 0; }
  // Seconds this member spent, while waiting in collectives, running other
  // work of its process (memory_options::while_waiting): computing, not
  // waiting nor exchanging. Cumulative; not part of waited_s().
  virtual double lent_s() const { return 0; }

  // Name for logs: backend, group, epoch.
  virtual std::string describe() const = 0;
};

} // namespace tutti::comm
