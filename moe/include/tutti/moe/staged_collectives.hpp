#pragma once
// Collectives on float tensors in a stream's memory, through any
// communicator. In place where that works: host tensors (CPU), or a
// communicator that takes device memory (NCCL). Otherwise (a GPU model
// over Gloo) through host staging buffers, kept between calls.
//
// On CUDA the stream is waited for first: the communicator runs on its own
// stream or on the host, after the kernels that produced the data; it
// returns when the results are in place.

#include <cstdint>
#include <vector>

#include "tutti/comm/communicator.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"

namespace tutti::moe {

class staged_collectives {
public:
  explicit staged_collectives(kernels::stream s) : stream_(s) {}

  // Every element summed in member order on every communicator: where the
  // transport adds in an order of its own (NCCL's ring or tree;
  // comm::communicator::sums_in_member_order), as reduce_scatter_sum then
  // all_gather, which move the bytes of a ring all-reduce (2 (n-1)/n of
  // the buffer per member) as grouped point-to-point transfers. So dense
  // and expert gradients, TP sums and the distributed optimizer's slices
  // have the same bits on NCCL as on Gloo or in one process.
  status all_reduce_sum(comm::communicator& c, float* data, size_t count);

  // Sum over the members of slice comm::member_slice(count, size, rank)
  // of `data`, into that slice (the rest is left as it was). Each element
  // is summed in member order, as all_reduce_sum over Gloo or in memory
  // does: the slice gets the same bits an all-reduce would give it.
  status reduce_scatter_sum(comm::communicator& c, float* data, size_t count);

  // Every member's slice of `data` to every member: the inverse of
  // reduce_scatter_sum's split.
  status all_gather(comm::communicator& c, float* data, size_t count);

  // Every member's slice of `data` (count elements) to member 0's `out`
  // (count elements; ignored elsewhere): what a checkpoint of a sharded
  // buffer needs, without a full-size buffer on the other members.
  status gather_to_first(comm::communicator& c, const float* data,
                         size_t count, float* out);

  // Counts are in floats per member, as comm::communicator::all_to_all_v.
  status all_to_all_v(comm::communicator& c, const float* send,
                      const std::vector<int64_t>& send_counts, float* recv,
                      const std::vector<int64_t>& recv_counts);

  const kernels::stream& stream() const { return stream_; }

private:
  bool staged(const comm::communicator& c) const;

  kernels::stream stream_;
  std::vector<float> send_host_, recv_host_;
  kernels::tensor<float> slices_; // one slice per member, in the stream's memory
};

} // namespace tutti::moe
