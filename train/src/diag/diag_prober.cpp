#include "diag/diag_prober.hpp"

#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <gloo/alltoall.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "tutti/runtime/rendezvous.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/comm/gloo_communicator.hpp"

namespace tutti {

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class prober {
public:
  prober(comm::communicator& c, double throttle_gbps)
    : comm_(c), n_(c.size()), me_(c.rank()), throttle_(throttle_gbps) {}

  // Seconds for one all_to_all_v where only `from` sends `bytes` to `to`.
  status one_way(int from, int to, int64_t bytes, double& seconds) {
    std::vector<int64_t> send(n_, 0), recv(n_, 0);
    if (me_ == from)
      send[to] = bytes;
    if (me_ == to)
      recv[from] = bytes;
    buf_.resize(std::max<int64_t>(bytes, 1));
    out_.resize(std::max<int64_t>(bytes, 1));
    auto t0 = clock_type::now();
    if (me_ == from && throttle_ > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(
        static_cast<double>(bytes) / (throttle_ * 1e9)));
    TUTTI_RETURN_IF_ERROR(
      comm_.all_to_all_v(buf_.data(), send, out_.data(), recv, 1));
    seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    return {};
  }

  // Every ordered pair in turn; this node keeps the rows where it sends.
  status point_to_point(diag_row& row) {
    const int64_t bw_bytes = 8 << 20;
    // The diagonal stays 0: CAF 0.17's serializer does not carry NaN.
    row.send_gbps.assign(n_, 0.0);
    row.latency_us.assign(n_, 0.0);
    for (int from = 0; from < n_; ++from)
      for (int to = 0; to < n_; ++to) {
        if (from == to)
          continue;
        std::vector<double> bw, lat;
        for (int i = 0; i < 10; ++i) {
          double s = 0;
          TUTTI_RETURN_IF_ERROR(one_way(from, to, 1, s));
          lat.push_back(s);
        }
        // Medians of 8 after a warm-up: two nodes on a busy machine vary
        // by 10% between single transfers, the straggler threshold.
        for (int i = 0; i < 9; ++i) {
          double s = 0;
          TUTTI_RETURN_IF_ERROR(one_way(from, to, bw_bytes, s));
          if (i > 0)
            bw.push_back(bw_bytes / s / 1e9);
        }
        if (from == me_) {
          row.send_gbps[to] = median(bw);
          row.latency_us[to] = median(lat) * 1e6;
        }
      }
    return {};
  }

  // nccl-tests' all-to-all: algbw = bytes per rank / time, busbw = algbw *
  // (n - 1) / n.
  status all_to_all(int64_t per_peer, double& busbw) {
    std::vector<int64_t> counts(n_, per_peer);
    buf_.resize(per_peer * n_);
    out_.resize(per_peer * n_);
    std::vector<double> times;
    for (int i = 0; i < 9; ++i) {
      auto t0 = clock_type::now();
      if (throttle_ > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(
          static_cast<double>(per_peer * (n_ - 1)) / (throttle_ * 1e9)));
      TUTTI_RETURN_IF_ERROR(
        comm_.all_to_all_v(buf_.data(), counts, out_.data(), counts, 1));
      if (i > 0)
        times.push_back(
          std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    busbw = per_peer * n_ / median(times) / 1e9 * (n_ - 1) / n_;
    return {};
  }

private:
  comm::communicator& comm_;
  int n_, me_;
  double throttle_;
  std::vector<char> buf_, out_;
};

// The same exchange straight through Gloo's API: the anchor that shows what
// tutti's communicator adds.
double raw_gloo_busbw(gloo::rendezvous::Store& store, const std::string& host,
                      int rank, int size, int64_t per_peer,
                      std::chrono::milliseconds timeout, double throttle) {
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  gloo::rendezvous::PrefixStore prefixed("raw", store);
  context->connectFullMesh(prefixed, device);
  std::vector<char> in(per_peer * size), out(per_peer * size);
  // Its connections are new: warm them up as long as the tutti path's were
  // warmed by the point-to-point phase.
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    gloo::AlltoallOptions opts(context);
    opts.setInput(in.data(), in.size());
    opts.setOutput(out.data(), out.size());
    opts.setTag(static_cast<uint32_t>(i + 1));
    auto t0 = clock_type::now();
    if (throttle > 0) // the same slow NIC as the tutti path
      std::this_thread::sleep_for(std::chrono::duration<double>(
        static_cast<double>(per_peer * (size - 1)) / (throttle * 1e9)));
    gloo::alltoall(opts);
    if (i > 3)
      times.push_back(
        std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return per_peer * size / median(times) / 1e9 * (size - 1) / size;
}

void prober_main(caf::blocking_actor* self, diag_prober_args a) {
  diag_row row;
  row.node_rank = a.node_rank;
  const auto& cl = a.cfg.cluster;
  const auto timeout = std::chrono::milliseconds(cl.collective_timeout_ms);
  const auto host = cl.node(a.node_rank).host;
  const int n = static_cast<int>(cl.nnodes), me = static_cast<int>(a.node_rank);
  double throttle = 0;
  if (const char* t = std::getenv("TUTTI_DIAG_THROTTLE_GBPS"))
    throttle = std::atof(t);
  auto run = [&]() -> status {
    actor_store store(self->system(), a.coordinator, timeout);
    std::unique_ptr<comm::communicator> c;
    comm::gloo_options opts;
    opts.host = host;
    opts.group = "diag" + std::to_string(a.round);
    opts.timeout = timeout;
    TUTTI_RETURN_IF_ERROR(comm::make_gloo_communicator(store, me, n, opts, c));
    prober p(*c, throttle);
    TUTTI_RETURN_IF_ERROR(p.point_to_point(row));
    for (int64_t size :
         {int64_t{64} << 10, int64_t{1} << 20, int64_t{8} << 20}) {
      double busbw = 0;
      TUTTI_RETURN_IF_ERROR(p.all_to_all(size, busbw));
      row.sizes.push_back(size);
      row.busbw_gbps.push_back(busbw);
      try {
        gloo::rendezvous::PrefixStore round_store(
          "diagraw" + std::to_string(a.round) + "/" + std::to_string(size),
          store);
        row.raw_busbw_gbps.push_back(
          raw_gloo_busbw(round_store, host, me, n, size, timeout, throttle));
      } catch (const std::exception& ex) {
        return status::error(std::string("raw gloo all-to-all: ") + ex.what());
      }
    }
    return {};
  };
  if (n < 2) {
    row.error = "one node: nothing to measure between nodes";
  } else if (auto s = run(); !s.ok()) {
    row.error = s.message();
    log_error("diag_prober", s.message());
  }
  self->send(a.coordinator, std::move(row));
}

} // namespace

caf::actor spawn_diag_prober(caf::actor_system& sys, diag_prober_args args) {
  return sys.spawn<caf::detached>(prober_main, std::move(args));
}

} // namespace tutti
