#include "tutti/model/staged_collectives.hpp"

#include <numeric>

#include "tutti/kernels/device_memory.hpp"

namespace tutti::model {

namespace k = tutti::kernels;

bool staged_collectives::staged(const comm::communicator& c) const {
  return stream_.device == k::device_kind::cuda && !c.takes_device_memory();
}

status staged_collectives::all_reduce_sum(comm::communicator& c, float* data,
                                          size_t count) {
  k::wait(stream_);
  if (!staged(c))
    return c.all_reduce_sum(data, count);
  send_host_.resize(count);
  k::download(stream_, send_host_.data(), data, count * sizeof(float));
  TUTTI_RETURN_IF_ERROR(c.all_reduce_sum(send_host_.data(), count));
  k::upload(stream_, data, send_host_.data(), count * sizeof(float));
  return {};
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

} // namespace tutti::model
