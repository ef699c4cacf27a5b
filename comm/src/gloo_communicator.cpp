#include "tutti/comm/gloo_communicator.hpp"

#include <gloo/alltoallv.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>

#include "gloo_abort.hpp"
#include "tutti/comm/data_plane_peers.hpp"
#include "tutti/comm/slices.hpp"
#include "gloo_check.hpp"
#include "sum_overloads.hpp"

namespace tutti::comm {
namespace {

class gloo_communicator final : public sums_by_template<gloo_communicator> {
  friend class sums_by_template<gloo_communicator>;

public:
  gloo_communicator(std::shared_ptr<gloo::Context> context,
                    gloo_options options)
    : context_(std::move(context)), options_(std::move(options)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  status all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                      void* recv, const std::vector<int64_t>& recv_counts,
                      size_t element_bytes) override {
    TUTTI_RETURN_IF_ERROR(check_not_aborted());
    if (size() == 1) {
      std::memcpy(recv, send, send_counts[0] * element_bytes);
      return {};
    }
    // Gloo refuses null buffers even for empty exchanges.
    static char empty[16];
    auto* in = const_cast<void*>(send ? send : static_cast<const void*>(empty));
    auto* out = recv ? recv : static_cast<void*>(empty);
    // Gloo counts in elements of a type; use bytes as the element type.
    std::vector<int64_t> send_bytes(send_counts.size());
    std::vector<int64_t> recv_bytes(recv_counts.size());
    for (size_t p = 0; p < send_counts.size(); ++p) {
      send_bytes[p] = send_counts[p] * static_cast<int64_t>(element_bytes);
      recv_bytes[p] = recv_counts[p] * static_cast<int64_t>(element_bytes);
    }
    auto in_buffer = context_->createUnboundBuffer(in, total(send_bytes));
    auto out_buffer = context_->createUnboundBuffer(out, total(recv_bytes));
    std::optional<gloo::AlltoallvOptions> opts(std::in_place, context_);
    status done;
    {
      in_flight flight(*this, {in_buffer.get(), out_buffer.get()});
      TUTTI_RETURN_IF_ERROR(flight.admitted());
      opts->setInput<uint8_t>(std::move(in_buffer), send_bytes);
      opts->setOutput<uint8_t>(std::move(out_buffer), recv_bytes);
      opts->setTag(next_tag());
      opts->setTimeout(options_.timeout);
      done = exchange(*opts);
    }
    // Failed, the exchange may still have bytes moving in or out of the
    // caller's memory, which is freed once we return.
    if (!done.ok())
      with_gloo_pairs_locked(*context_, [&] { opts.reset(); });
    return done;
  }

  status all_to_all(const int64_t* send, int64_t* recv,
                    size_t per_member) override {
    std::vector<int64_t> counts(size(), static_cast<int64_t>(per_member));
    return all_to_all_v(send, counts, recv, counts, sizeof(int64_t));
  }

  // One byte to and from every member: no member leaves before all came.
  // (gloo::barrier's own buffer could not be failed by abort().)
  status barrier() override {
    std::vector<uint8_t> send(size()), recv(size());
    const std::vector<int64_t> ones(size(), 1);
    return all_to_all_v(send.data(), ones, recv.data(), ones, 1);
  }

  // Unbound buffers under a slot of our own prefix, apart from the
  // collectives' (gloo/types.h numbers theirs from 0x01).
  status send(int peer, uint32_t tag, const void* data,
              size_t bytes) override {
    TUTTI_RETURN_IF_ERROR(check_not_aborted());
    auto buffer =
      context_->createUnboundBuffer(const_cast<void*>(data), bytes);
    TUTTI_GLOO_CHECK(buffer->send(peer, gloo::Slot::build(kPointSlot, tag)));
    std::lock_guard<std::mutex> guard(flight_lock_);
    pending_sends_.push_back(std::move(buffer));
    return {};
  }

  status recv(int peer, uint32_t tag, void* data, size_t bytes) override {
    TUTTI_RETURN_IF_ERROR(check_not_aborted());
    auto buffer = context_->createUnboundBuffer(data, bytes);
    status done;
    {
      in_flight flight(*this, {buffer.get()});
      TUTTI_RETURN_IF_ERROR(flight.admitted());
      done = wait_recv(*buffer, peer, gloo::Slot::build(kPointSlot, tag));
    }
    if (!done.ok())
      with_gloo_pairs_locked(*context_, [&] { buffer.reset(); });
    return done;
  }

  status wait_sends() override {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends;
    {
      std::lock_guard<std::mutex> guard(flight_lock_);
      sends.swap(pending_sends_);
    }
    status done;
    for (auto& buffer : sends)
      if (done.ok())
        done = wait_send(*buffer);
    if (!done.ok())
      with_gloo_pairs_locked(*context_, [&] { sends.clear(); });
    return done;
  }

  // Wakes this member's collective under way, and every member's that
  // waits on it: the pairs' sockets are shut down and the buffers in
  // flight fail.
  status abort() override {
    std::lock_guard<std::mutex> guard(flight_lock_);
    if (aborted_.exchange(true))
      return {};
    shutdown_gloo_pairs(*context_);
    for (auto* buffer : flight_buffers_)
      fail_gloo_buffer(*buffer, describe() + ": aborted");
    for (auto& buffer : pending_sends_)
      fail_gloo_buffer(*buffer, describe() + ": aborted");
    return {};
  }

  bool sums_in_member_order() const override { return true; } // reduce()

  std::string describe() const override {
    return "gloo/" + options_.group + " rank " + std::to_string(rank()) + "/"
           + std::to_string(size());
  }

private:
  // The buffers of the collective under way, known to abort() from the
  // moment they are made until just before they are destroyed.
  class in_flight {
  public:
    in_flight(gloo_communicator& comm,
              std::vector<gloo::transport::UnboundBuffer*> buffers)
      : comm_(comm) {
      std::lock_guard<std::mutex> guard(comm_.flight_lock_);
      if (comm_.aborted_)
        return;
      comm_.flight_buffers_ = std::move(buffers);
      admitted_ = true;
    }
    ~in_flight() {
      std::lock_guard<std::mutex> guard(comm_.flight_lock_);
      comm_.flight_buffers_.clear();
    }
    status admitted() const {
      return admitted_ ? status{} : comm_.check_not_aborted();
    }

  private:
    gloo_communicator& comm_;
    bool admitted_ = false;
  };

  static status exchange(gloo::AlltoallvOptions& opts) {
    TUTTI_GLOO_CHECK(gloo::alltoallv(opts));
    return {};
  }

  status wait_recv(gloo::transport::UnboundBuffer& buffer, int peer,
                   uint64_t slot) {
    TUTTI_GLOO_CHECK(buffer.recv(peer, slot));
    TUTTI_GLOO_CHECK(buffer.waitRecv(options_.timeout));
    return check_not_aborted();
  }

  status wait_send(gloo::transport::UnboundBuffer& buffer) {
    TUTTI_GLOO_CHECK(buffer.waitSend(options_.timeout));
    return check_not_aborted();
  }

  static constexpr uint8_t kPointSlot = 0x70;

  static size_t total(const std::vector<int64_t>& bytes) {
    return static_cast<size_t>(
      std::accumulate(bytes.begin(), bytes.end(), int64_t{0}));
  }

  // A reduce-scatter and an all-gather, each one all-to-all: member r sums
  // slice r over the members in member order (member 0's value, plus member
  // 1's, ...), the order memory_communicator uses, so a group gives the same
  // bits in one process or across several. (gloo::allreduce's ring adds in
  // an order that depends on the member and the segment.)
  template <class T>
  status reduce(T* data, size_t count) {
    TUTTI_RETURN_IF_ERROR(check_not_aborted());
    const int n = size();
    if (n == 1 || count == 0)
      return {};
    std::vector<int64_t> lengths(n);
    for (int p = 0; p < n; ++p)
      lengths[p] = member_slice(static_cast<int64_t>(count), n, p).count;
    const int64_t mine = lengths[rank()];
    std::vector<T> gathered(static_cast<size_t>(mine) * n);
    TUTTI_RETURN_IF_ERROR(all_to_all_v(data, lengths, gathered.data(),
                                       std::vector<int64_t>(n, mine),
                                       sizeof(T)));
    std::vector<T> sums(static_cast<size_t>(mine) * n);
    for (int64_t i = 0; i < mine; ++i) {
      T sum = gathered[i];
      for (int p = 1; p < n; ++p)
        sum += gathered[p * mine + i];
      for (int p = 0; p < n; ++p)
        sums[p * mine + i] = sum; // one copy for each member
    }
    return all_to_all_v(sums.data(), std::vector<int64_t>(n, mine), data,
                        lengths, sizeof(T));
  }

  uint32_t next_tag() { return tag_++; }

  status check_not_aborted() const {
    return aborted_ ? status::error(describe() + ": aborted") : status{};
  }

  std::shared_ptr<gloo::Context> context_;
  gloo_options options_;
  std::atomic<bool> aborted_{false};
  std::mutex flight_lock_;
  std::vector<gloo::transport::UnboundBuffer*> flight_buffers_;
  // Sends posted and not yet waited for (wait_sends).
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> pending_sends_;
  uint32_t tag_ = 1;
};

} // namespace

status make_gloo_communicator(gloo::rendezvous::Store& store, int rank,
                              int size, const gloo_options& options,
                              std::unique_ptr<communicator>& out) {
  gloo::transport::tcp::attr attr;
  attr.hostname = options.host;
  std::shared_ptr<gloo::transport::Device> device;
  TUTTI_GLOO_CHECK(device = gloo::transport::tcp::CreateDevice(attr));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.connect_timeout);
  gloo::rendezvous::PrefixStore prefixed(options.group, store);
  TUTTI_GLOO_CHECK(context->connectFullMesh(prefixed, device));
  context->setTimeout(options.timeout);
  if (!options.members.empty() && size > 1) {
    // Every pair's address is this device's listener.
    auto& pair = context->getPair(rank == 0 ? 1 : 0);
    const auto& self = static_cast<const gloo::transport::tcp::Address&>(
      pair->address());
    const auto& ss = self.getSockaddr();
    const uint16_t port = ntohs(
      ss.ss_family == AF_INET6
        ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port
        : reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
    auto strangers = non_member_peers(port, options.members);
    if (!strangers)
      return strangers.error();
    if (!strangers->empty()) {
      context->closeConnections();
      return status::error(
        options.group + ": data-plane connection from " + strangers->front()
        + ", which is not a cluster node (cluster_config.nodes): refused");
    }
  }
  out = std::make_unique<gloo_communicator>(std::move(context), options);
  return {};
}

} // namespace tutti::comm
