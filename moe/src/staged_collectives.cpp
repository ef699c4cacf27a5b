#include "tutti/moe/staged_collectives.hpp"

#include <numeric>

#include "tutti/comm/slices.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"

namespace tutti::moe {

namespace k = tutti::kernels;

bool staged_collectives::staged(const comm::communicator& c) const {
  return stream_.device == k::device_kind::cuda && !c.takes_device_memory();
}

status staged_collectives::all_reduce_sum(comm::communicator& c, float* data,
                                          size_t count) {
  // A transport that adds in its own order (NCCL) sums by member-order
  // reduce-scatter and all-gather instead: the bits of every other
  // communicator's all-reduce, and of the distributed optimizer's slices.
  if (!c.sums_in_member_order() && c.size() > 1) {
    TUTTI_RETURN_IF_ERROR(reduce_scatter_sum(c, data, count));
    return all_gather(c, data, count);
  }
  k::wait(stream_);
  if (!staged(c))
    return c.all_reduce_sum(data, count);
  send_host_.resize(count);
  k::download(stream_, send_host_.data(), data, count * sizeof(float));
  TUTTI_RETURN_IF_ERROR(c.all_reduce_sum(send_host_.data(), count));
  k::upload(stream_, data, send_host_.data(), count * sizeof(float));
  return {};
}

status staged_collectives::reduce_scatter_sum(comm::communicator& c,
                                              float* data, size_t count) {
  const int n = c.size();
  if (n == 1 || count == 0)
    return {};
  const auto total = static_cast<int64_t>(count);
  const auto mine = comm::member_slice(total, n, c.rank());
  std::vector<int64_t> send(n), recv(n, mine.count);
  for (int p = 0; p < n; ++p)
    send[p] = comm::member_slice(total, n, p).count;
  slices_.resize(stream_, static_cast<size_t>(std::max<int64_t>(mine.count * n, 1)));
  TUTTI_RETURN_IF_ERROR(all_to_all_v(c, data, send, slices_.data(), recv));
  float* out = data + mine.first;
  // y += 1 * x rounds once, as the communicators' `sum += x`.
  k::copy_on(stream_, out, slices_.data(), mine.count * sizeof(float));
  for (int p = 1; p < n; ++p)
    k::axpy(stream_, 1.0f, slices_.data() + p * mine.count, out, mine.count);
  return {};
}

status staged_collectives::all_gather(comm::communicator& c, float* data,
                                      size_t count) {
  const int n = c.size();
  if (n == 1 || count == 0)
    return {};
  const auto total = static_cast<int64_t>(count);
  const auto mine = comm::member_slice(total, n, c.rank());
  std::vector<int64_t> send(n, mine.count), recv(n);
  for (int p = 0; p < n; ++p)
    recv[p] = comm::member_slice(total, n, p).count;
  slices_.resize(stream_, static_cast<size_t>(std::max<int64_t>(mine.count * n, 1)));
  for (int p = 0; p < n; ++p)
    k::copy_on(stream_, slices_.data() + p * mine.count, data + mine.first,
               mine.count * sizeof(float));
  return all_to_all_v(c, slices_.data(), send, data, recv);
}

status staged_collectives::gather_to_first(comm::communicator& c,
                                           const float* data, size_t count,
                                           float* out) {
  const int n = c.size();
  const auto total = static_cast<int64_t>(count);
  const auto mine = comm::member_slice(total, n, c.rank());
  std::vector<int64_t> send(n, 0), recv(n, 0);
  send[0] = mine.count;
  if (c.rank() == 0)
    for (int p = 0; p < n; ++p)
      recv[p] = comm::member_slice(total, n, p).count;
  return all_to_all_v(c, data, send, c.rank() == 0 ? out : nullptr, recv);
}

status staged_collectives::all_to_all_v(
  comm::communicator& c, const float* send,
  const std::vector<int64_t>& send_counts, float* recv,
  const std::vector<int64_t>& recv_counts) {
  k::wait(stream_);
  if (!staged(c))
    return c.all_to_all_v(send, send_counts, recv, recv_counts, sizeof(float));
  const auto sent = std::accumulate(send_counts.begin(), send_counts.end(),
                                    int64_t{0});
  const auto got = std::accumulate(recv_counts.begin(), recv_counts.end(),
                                   int64_t{0});
  send_host_.resize(static_cast<size_t>(std::max<int64_t>(sent, 1)));
  recv_host_.resize(static_cast<size_t>(std::max<int64_t>(got, 1)));
  k::download(stream_, send_host_.data(), send, sent * sizeof(float));
  TUTTI_RETURN_IF_ERROR(c.all_to_all_v(send_host_.data(), send_counts,
                                       recv_host_.data(), recv_counts,
                                       sizeof(float)));
  k::upload(stream_, recv, recv_host_.data(), got * sizeof(float));
  return {};
}

} // namespace tutti::moe
