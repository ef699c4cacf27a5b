#include "rank/replica_exchange.hpp"

#include "node/replica_store.hpp"
#include "rank/snapshot_codec.hpp"
#include "tutti/base/core_pinning.hpp"
#include "tutti/elastic/replica_peers.hpp"

#include <chrono>

namespace tutti {

namespace {

// Tags of the replica messages on their own links: the header's
// size, the header, then each tensor's data, told apart from the next
// exchanges' by the step.
uint32_t replica_tag(int64_t step, uint64_t message) {
  return 0x40000000u | static_cast<uint32_t>(step & 0x3f) << 16
         | static_cast<uint32_t>(message);
}
constexpr uint64_t max_tensors = 0xffff - 2;

} // namespace

status exchange_replicas(const rank_args& a, const replica_links& links,
                         rank_snapshot_ptr snap, int64_t& bytes_sent) {
  const auto& cfg = a.cfg;
  const auto world_size = cfg.cluster.world_size;
  a.replicas->put(world_size, snap);
  bytes_sent = 0;
  if (!links.out || !links.in)
    return {}; // one node: no other node to keep a copy
  const auto from = static_cast<int>(elastic::replica_source(cfg, a.rank));
  const auto step = snap->step;
  const auto header = encode_snapshot_header(*snap);
  const auto tensors = snapshot_tensors(*snap);
  if (tensors.size() > max_tensors)
    return status::error("a rank's state of " + std::to_string(tensors.size())
                         + " tensors is too many to copy");
  auto& out = *links.out;
  auto& in = *links.in;
  const uint64_t header_size = header.size();
  TUTTI_RETURN_IF_ERROR(out.send(1, replica_tag(step, 0), &header_size, 8));
  TUTTI_RETURN_IF_ERROR(
    out.send(1, replica_tag(step, 1), header.data(), header_size));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& data = tensors[i]->data;
    TUTTI_RETURN_IF_ERROR(out.send(1, replica_tag(step, 2 + i), data.data(),
                                   data.size() * sizeof(float)));
    bytes_sent += static_cast<int64_t>(data.size() * sizeof(float));
  }
  uint64_t in_size = 0;
  TUTTI_RETURN_IF_ERROR(in.recv(0, replica_tag(step, 0), &in_size, 8));
  if (in_size > (uint64_t{1} << 30))
    return status::error("replica header from rank " + std::to_string(from)
                         + " claims " + std::to_string(in_size) + " bytes");
  std::string header_in(in_size, '\0');
  TUTTI_RETURN_IF_ERROR(
    in.recv(0, replica_tag(step, 1), header_in.data(), in_size));
  auto copy = decode_snapshot_header(header_in);
  if (!copy.ok())
    return status::error("from rank " + std::to_string(from) + ": "
                         + copy.message());
  auto& peer = *copy.value();
  if (peer.rank != from || peer.step != step)
    return status::error("replica from rank " + std::to_string(from)
                         + " holds rank " + std::to_string(peer.rank)
                         + " step " + std::to_string(peer.step));
  if (peer.tensors.size() > max_tensors)
    return status::error("replica from rank " + std::to_string(from)
                         + ": too many tensors");
  for (size_t i = 0; i < peer.tensors.size(); ++i) {
    auto& data = peer.tensors[i].data;
    TUTTI_RETURN_IF_ERROR(in.recv(0, replica_tag(step, 2 + i), data.data(),
                                  data.size() * sizeof(float)));
  }
  TUTTI_RETURN_IF_ERROR(out.wait_sends());
  a.replicas->put(world_size, std::move(copy.value()));
  bytes_sent += static_cast<int64_t>(header_size);
  return {};
}

replica_copier::~replica_copier() {
  if (!thread_.joinable())
    return;
  if (!finished_) // its peer may be gone: do not wait out a timeout
    for (auto* link : {links_.out, links_.in})
      if (link)
        (void)link->abort();
  thread_.join();
}

status replica_copier::wait() {
  if (!thread_.joinable())
    return {};
  thread_.join();
  if (result_.ok())
    return {};
  return status::error("copy of step " + std::to_string(in_flight_step_)
                       + " to its peer: " + result_.message());
}

status replica_copier::poll() {
  return finished_ && !result_.ok() ? wait() : status{};
}

void replica_copier::send_now(step_report& r) {
  r.replica_step = done_step_;
  r.replica_bytes = done_bytes_;
  r.time_replica_copy_s = done_s_;
  send_(std::move(r));
}

void replica_copier::report(step_report r) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (failed_)
    return; // a step after one whose copy failed: the rank is failing
  if (busy_)
    held_.push_back(std::move(r));
  else
    send_now(r);
}

status replica_copier::start(const replica_links& links,
                             rank_snapshot_ptr snap) {
  TUTTI_RETURN_IF_ERROR(wait());
  links_ = links;
  in_flight_step_ = snap->step;
  in_flight_bytes_ = 0;
  finished_ = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    busy_ = true;
  }
  thread_ = std::thread([this, snap = std::move(snap)]() mutable {
    // Beside the step, not on the pinned rank's core.
    run_on_process_cpus();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      result_ = exchange_replicas(a_, links_, std::move(snap),
                                  in_flight_bytes_);
    } catch (const std::exception& ex) { // bad_alloc for the peer's copy
      result_ = status::error(ex.what());
    }
    std::lock_guard<std::mutex> guard(mutex_);
    if (result_.ok()) {
      done_step_ = in_flight_step_;
      done_bytes_ = in_flight_bytes_;
      done_s_ = std::chrono::duration<double>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
      for (auto& r : held_)
        send_now(r);
    } else {
      failed_ = true; // the steps held are not safe: the rank fails
    }
    held_.clear();
    busy_ = false;
    finished_ = true;
  });
  return {};
}

} // namespace tutti
