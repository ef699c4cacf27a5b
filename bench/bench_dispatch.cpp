// MoE dispatch + combine over Gloo: permute_plan, a count exchange,
// permute_rows, all_to_all_v to the experts' ranks, identity experts,
// all_to_all_v back, unpermute_combine. Ranks are threads of this process,
// each with its own TCP connections. Anchors from the same run: raw
// gloo::alltoallv (Gloo's own API, not our communicator) moving the same
// bytes per rank pair there and back, and loopback TCP measured by iperf3.

#include <gloo/alltoallv.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "tutti/comm/gloo_communicator.hpp"
#include "tutti/kernels/ops.hpp"

namespace k = tutti::kernels;
using namespace tutti;
using namespace tutti::bench;

namespace {

constexpr int64_t experts = 8, top_k = 2, hidden = 256;
const std::vector<int64_t> sizes = {1024, 4096, 16384}; // tokens per rank
// More repetitions of the short exchanges: a scheduler hiccup on the shared
// cores lasts as long as one of them, and they are cheap.
const std::vector<int> reps_of = {144, 48, 15};
constexpr int max_reps = 144;
const auto timeout = std::chrono::milliseconds(60000);

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_dispatch: %s\n", what.c_str());
  std::_Exit(1); // other rank threads may be blocked in Gloo
}

void check(const status& s) {
  if (!s.ok())
    die(s.message());
}

// What the rank threads of one world size hand back.
struct results {
  int world;
  std::vector<double> seconds; // [size][rep][method][rank]; methods:
                               // full path, our all_to_all_v only, raw Gloo
  std::vector<double> bytes;   // [size][rank]: payload that left the rank
  std::vector<double> max_err; // [size][rank]: combine(dispatch(x)) vs x
  double& at(size_t s, int rep, int method, int rank) {
    return seconds[((s * max_reps + rep) * 3 + method) * world + rank];
  }
};

void rank_main(int rank, gloo::rendezvous::Store& store, results& res) {
  const int W = res.world;
  const int64_t per = experts / W; // experts per rank, contiguous blocks
  // One core per rank (and its Gloo threads, created below): left alone, the
  // scheduler of a small shared VM stacks ranks on one core and the figures
  // measure that instead. All three methods run on these same threads.
  cpu_set_t core;
  CPU_ZERO(&core);
  CPU_SET(rank % std::thread::hardware_concurrency(), &core);
  pthread_setaffinity_np(pthread_self(), sizeof(core), &core);
  std::unique_ptr<comm::communicator> comm;
  check(comm::make_gloo_communicator(
    store, rank, W, {"127.0.0.1", "tutti", timeout, timeout, {}}, comm));
  // The anchor gets its own context and connections, as a plain Gloo user.
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, W);
  ctx->setTimeout(timeout);
  gloo::rendezvous::PrefixStore raw_store("raw", store);
  auto device = gloo::transport::tcp::CreateDevice(attr);
  ctx->connectFullMesh(raw_store, device);
  uint32_t tag = 1;
  const auto s = k::cpu_stream();

  for (size_t si = 0; si < sizes.size(); ++si) {
    const int64_t T = sizes[si];
    std::mt19937 gen(1000 * rank + si);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    std::vector<float> x(T * hidden), gate(T * top_k), out(T * hidden);
    std::vector<int32_t> topk(T * top_k), slot(T * top_k);
    for (auto& v : x)
      v = uni(gen) - 0.5f;
    for (int64_t t = 0; t < T; ++t) { // random routing: 2 distinct experts
      int32_t a = gen() % experts, b = gen() % (experts - 1);
      topk[t * 2] = a;
      topk[t * 2 + 1] = b >= a ? b + 1 : b;
      gate[t * 2] = uni(gen);
      gate[t * 2 + 1] = 1.0f - gate[t * 2]; // gates sum to 1: out == x
    }
    std::vector<int64_t> counts(experts), recv_ecounts(experts), send_n(W),
      recv_n(W);
    std::vector<float> send, recv, back;

    auto ours = [&] {
      const int64_t rows = k::permute_plan(s, topk.data(), T, experts, top_k,
                                           slot.data(), counts.data());
      // Receivers size their buffers from a fixed-size count exchange.
      check(comm->all_to_all(counts.data(), recv_ecounts.data(), per));
      int64_t rows_in = 0;
      for (int p = 0; p < W; ++p) {
        send_n[p] = recv_n[p] = 0;
        for (int64_t j = 0; j < per; ++j) {
          send_n[p] += counts[p * per + j];
          recv_n[p] += recv_ecounts[p * per + j];
        }
        rows_in += recv_n[p];
      }
      send.resize(rows * hidden); // no-ops after the warm-up call
      back.resize(rows * hidden);
      recv.resize(rows_in * hidden);
      k::permute_rows(s, x.data(), slot.data(), send.data(), rows, top_k,
                      hidden);
      check(comm->all_to_all_v(send.data(), send_n, recv.data(), recv_n,
                               hidden * sizeof(float)));
      // Identity experts: what arrived goes straight back.
      check(comm->all_to_all_v(recv.data(), recv_n, back.data(), send_n,
                               hidden * sizeof(float)));
      k::unpermute_combine(s, back.data(), slot.data(), gate.data(), out.data(),
                           rows, T, top_k, hidden);
    };
    // Our communicator's share alone: the same two exchanges, no kernels.
    auto ours_a2a = [&] {
      check(comm->all_to_all_v(send.data(), send_n, recv.data(), recv_n,
                               hidden * sizeof(float)));
      check(comm->all_to_all_v(recv.data(), recv_n, back.data(), send_n,
                               hidden * sizeof(float)));
    };
    auto raw = [&] {
      std::vector<int64_t> se(W), re(W); // in floats
      for (int p = 0; p < W; ++p) {
        se[p] = send_n[p] * hidden;
        re[p] = recv_n[p] * hidden;
      }
      gloo::AlltoallvOptions there(ctx);
      there.setInput(send.data(), se);
      there.setOutput(recv.data(), re);
      there.setTag(tag++);
      gloo::alltoallv(there);
      gloo::AlltoallvOptions home(ctx);
      home.setInput(recv.data(), re);
      home.setOutput(back.data(), se);
      home.setTag(tag++);
      gloo::alltoallv(home);
    };

    ours(); // warm-up; sizes the buffers and checks the round trip
    double err = 0;
    for (int64_t i = 0; i < T * hidden; ++i)
      err = std::max(err, static_cast<double>(std::abs(out[i] - x[i])));
    res.max_err[si * W + rank] = err;
    double moved = 0;
    for (int p = 0; p < W; ++p)
      if (p != rank)
        moved += static_cast<double>(send_n[p] + recv_n[p]) * hidden * 4;
    res.bytes[si * W + rank] = moved;
    raw();

    for (int rep = 0; rep < reps_of[si]; ++rep)
      for (int i = 0; i < 3; ++i) {
        const int method = (rep + i) % 3; // rotate which goes first
        check(comm->barrier());
        const double t0 = now_s();
        method == 0 ? ours() : method == 1 ? ours_a2a() : raw();
        res.at(si, rep, method, rank) = now_s() - t0;
      }
  }
}

results run_world(int W) {
  results res{W, std::vector<double>(sizes.size() * max_reps * 3 * W),
              std::vector<double>(sizes.size() * W),
              std::vector<double>(sizes.size() * W)};
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> ranks;
  for (int r = 0; r < W; ++r)
    ranks.emplace_back([&, r] { rank_main(r, store, res); });
  for (auto& t : ranks)
    t.join();
  return res;
}

std::string capture(const std::string& cmd) {
  std::string text;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p))
      text.append(buf, n);
    pclose(p);
  }
  return text;
}

// One 2-second single-stream loopback test, in GB/s; none if iperf3 is
// missing or never answers.
std::optional<double> iperf3_gbps(int port) {
  if (std::system("command -v iperf3 >/dev/null 2>&1") != 0)
    return std::nullopt;
  const std::string p = std::to_string(port);
  // timeout reaps the one-shot server should the client never reach it.
  std::system(
    ("timeout 20 iperf3 -s -1 -p " + p + " >/dev/null 2>&1 &").c_str());
  const std::regex re("\"sum_received\"\\s*:\\s*\\{[^}]*\"bits_per_second\""
                      "\\s*:\\s*([0-9.eE+]+)");
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto json = capture("iperf3 -c 127.0.0.1 -p " + p + " -t 2 -J 2>/dev/null");
    std::smatch m;
    if (std::regex_search(json, m, re))
      return std::stod(m[1]) / 8e9;
  }
  return std::nullopt;
}

} // namespace

int main() {
  // iperf3 before, between and after the two world sizes: the median sees
  // the machine in the same states the Gloo figures did.
  const int port = 20000 + getpid() % 20000;
  std::vector<double> tcp;
  auto probe = [&](int i) {
    if (auto g = iperf3_gbps(port + i))
      tcp.push_back(*g);
  };
  std::vector<results> all;
  probe(0);
  all.push_back(run_world(2));
  probe(1);
  all.push_back(run_world(4));
  probe(2);

  std::printf(
    "dispatch + combine, %lld experts top-%lld, hidden %lld fp32, "
    "random routing; GB/s = payload bytes that leave their rank "
    "(dispatch and combine, all ranks) / slowest rank's time; median of "
    "144/48/15 repetitions by size, methods rotated\n",
    (long long)experts, (long long)top_k, (long long)hidden);
  for (double g : tcp)
    std::printf("iperf3 loopback probe: %.2f GB/s\n", g);
  std::printf("\n");
  table t, vs_tcp;
  const std::string tcp_text = tcp.empty() ? "skipped (iperf3 missing)"
                                           : fmt("%.2f GB/s", median(tcp));
  for (auto& res : all)
    for (size_t si = 0; si < sizes.size(); ++si) {
      double bytes = 0, err = 0;
      std::vector<double> ours, a2a, raw;
      for (int r = 0; r < res.world; ++r) {
        bytes += res.bytes[si * res.world + r];
        err = std::max(err, res.max_err[si * res.world + r]);
      }
      if (err > 1e-5)
        die("round trip changed the tokens: max error " + fmt("%g", err));
      for (int rep = 0; rep < reps_of[si]; ++rep) {
        double o = 0, a = 0,
               w = 0; // a collective takes its slowest rank's time
        for (int r = 0; r < res.world; ++r) {
          o = std::max(o, res.at(si, rep, 0, r));
          a = std::max(a, res.at(si, rep, 1, r));
          w = std::max(w, res.at(si, rep, 2, r));
        }
        ours.push_back(o);
        a2a.push_back(a);
        raw.push_back(w);
      }
      const double go = bytes / median(ours) / 1e9,
                   ga = bytes / median(a2a) / 1e9,
                   gr = bytes / median(raw) / 1e9;
      char name[96], name_a2a[96];
      std::snprintf(name, sizeof(name),
                    "dispatch+combine, %d ranks, %lld tok/rank", res.world,
                    (long long)sizes[si]);
      std::snprintf(name_a2a, sizeof(name_a2a),
                    "its comm::all_to_all_v x2 alone, %d ranks, %lld tok/rank",
                    res.world, (long long)sizes[si]);
      t.add(name, fmt("%.2f GB/s", go), "raw gloo::alltoallv there and back",
            fmt("%.2f GB/s", gr), go / gr);
      t.add(name_a2a, fmt("%.2f GB/s", ga),
            "raw gloo::alltoallv there and back", fmt("%.2f GB/s", gr),
            ga / gr);
      vs_tcp.add(name, fmt("%.2f GB/s", go), "loopback TCP, iperf3 1 stream",
                 tcp_text, tcp.empty() ? NAN : go / median(tcp));
    }
  t.print();
  std::printf("\n");
  if (tcp.empty())
    std::printf("iperf3 not found: loopback TCP anchor skipped\n");
  else
    vs_tcp.print();
}
