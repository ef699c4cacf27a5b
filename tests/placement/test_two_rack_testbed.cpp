// The two-rack testbed (deploy/testbed-two-racks.sh): 2 racks x 2 nodes in
// network namespaces, the inter-rack link shaped to 1/8 of the node links.
// Checks the shaping (tc, and iperf3's measured ratio where iperf3 is
// installed), then runs a 4-daemon job across it (one rank per node, nodes
// labelled by rack) to its end, again with the rack-aware all-to-all (same
// losses to the bit, fewer inter-rack bytes), and plans a placement from
// the routing statistics the job kept; metrics.jsonl splits the
// all-to-all bytes by link class. Every namespace and daemon is removed on every
// path; waits are bounded.
//
// Needs root and iproute2/tc; where `ip netns add` is not allowed it prints
// why and exits 77 (CTest: skipped).

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <regex>

#include "daemon_support.hpp"
#include "netns_main.hpp"

using namespace tutti::testing;

namespace {

std::string script() { return source_dir() + "/deploy/testbed-two-racks.sh"; }

std::string base36(unsigned long v) {
  std::string s;
  do
    s.insert(s.begin(), "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36]);
  while (v /= 36);
  return s;
}

// Testbeds of runs whose process is gone (killed without unwinding).
void remove_stale_testbeds() {
  auto list = run("ip netns list", 20);
  std::regex re("^tutti-tb([0-9a-z]+)-sw");
  std::istringstream in(list.output);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, re))
      continue;
    const auto pid = static_cast<pid_t>(std::stoul(m[1], nullptr, 36));
    if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH)
      run(script() + " down " + m[1].str(), 30);
  }
}

struct testbed {
  std::string tag = base36(static_cast<unsigned long>(getpid()));
  bool up = false;
  std::string bring_up() {
    up = true;
    auto r = run(script() + " up " + tag + " 800 100", 60);
    return r.status == 0 ? "" : r.output;
  }
  ~testbed() {
    if (up)
      run(script() + " down " + tag, 30);
  }
  std::vector<std::string> exec_in(const std::string& node) const {
    return {script(), "exec", tag, node};
  }
  std::string ns(const std::string& node) const {
    return "tutti-tb" + tag + "-" + node;
  }
};

std::string why_not_available() {
  if (geteuid() != 0)
    return "not root: network namespaces and veth pairs need CAP_SYS_ADMIN "
           "and CAP_NET_ADMIN";
  if (run("ip -V", 10).status != 0 || run("tc -V", 10).status != 0)
    return "`ip` or `tc` (iproute2) is not installed";
  remove_stale_testbeds();
  const std::string probe = "tutti-tbprobe-" + std::to_string(getpid());
  auto r = run("ip netns add " + probe, 10);
  run("ip netns del " + probe + " 2>/dev/null", 10);
  if (r.status != 0)
    return "`ip netns add` is not allowed here: " + r.output;
  return "";
}

// iperf3 from node `from` to `to_addr` (a server started in `to`), Mb/s.
double measure_mbit(const testbed& tb, const std::string& from,
                    const std::string& to, const std::string& to_addr,
                    int port) {
  const auto p = std::to_string(port);
  run("ip netns exec " + tb.ns(to) + " iperf3 -s -1 -D -p " + p, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto r = run("ip netns exec " + tb.ns(from) + " iperf3 -c " + to_addr + " -p "
                 + p + " -t 2 -f m | grep receiver",
               20);
  std::smatch m;
  if (!std::regex_search(r.output, m,
                         std::regex("([0-9.]+) Mbits/sec.*receiver")))
    return -1;
  return std::stod(m[1]);
}

} // namespace

TEST_CASE("a 4-daemon job runs across the two-rack testbed", "[integration]") {
  testbed tb;
  auto failed = tb.bring_up();
  INFO(failed);
  REQUIRE(failed.empty());
  auto inter = run("tc -n " + tb.ns("sw") + " qdisc show dev x0", 10);
  auto intra = run("tc -n " + tb.ns("sw") + " qdisc show dev p0", 10);
  CHECK(inter.output.find("rate 100Mbit") != std::string::npos);
  CHECK(intra.output.find("rate 800Mbit") != std::string::npos);
  if (run("iperf3 -v", 10).status == 0) {
    const double in_rack = measure_mbit(tb, "r0n0", "r0n1", "10.211.0.2", 5301);
    const double across = measure_mbit(tb, "r0n0", "r1n1", "10.211.0.4", 5302);
    INFO("in rack " << in_rack << " Mb/s, across racks " << across << " Mb/s");
    CHECK(in_rack > 0);
    CHECK(across > 0);
    CHECK(across < 0.25 * in_rack);
  } else {
    WARN("iperf3 not installed: bandwidth ratio not measured");
  }

  const int steps = 10;
  auto dir = scratch("two_rack_testbed");
  auto data = dir / "data";
  auto synth = run(tutti_bin() + " data synth --out " + data.string()
                     + " --vocab 32 --topics 4 --seed 5 --tokens 20000",
                   60);
  REQUIRE(synth.status == 0);
  auto text = daemon_config(
    data.string(), (dir / "run").string(), port_block(21, 5), steps,
    {"10.211.0.1", "10.211.0.2", "10.211.0.3", "10.211.0.4"});
  for (auto [from, to] : {std::pair{"rack: r1}", "rack: r0}"},
                          std::pair{"rack: r2}", "rack: r1}"},
                          std::pair{"rack: r3}", "rack: r1}"}})
    text = replace_once(text, from, to);
  text = insert_after(text, "  bias_update_rate: 0.001\n",
                      "  routing_stats_window: 5\n");
  const auto cfg = dir / "job.yaml";
  write_text(cfg, text);
  auto run_job = [&](const std::filesystem::path& config,
                     const std::string& logs) {
    const char* nodes[] = {"r0n0", "r0n1", "r1n0", "r1n1"};
    std::vector<std::unique_ptr<tutti::child_process>> daemons;
    for (int n = 3; n >= 0; --n)
      daemons.push_back(
        start_daemon(config, n, dir / (logs + std::to_string(n) + ".log"),
                     tb.exec_in(nodes[n])));
    const int s0 = daemons.back()->wait(300);
    INFO("node0: " << tail(read_text(dir / (logs + "0.log"))));
    REQUIRE(s0 == 0);
    for (int i = 0; i < 3; ++i) {
      INFO("node" << 3 - i << ": "
                  << tail(read_text(
                       dir / (logs + std::to_string(3 - i) + ".log"))));
      CHECK(daemons[i]->wait(60) == 0);
    }
  };
  run_job(cfg, "node");
  // The same job with the rack-aware all-to-all, over the shaped links and
  // Gloo between the daemons: the same losses to the bit, fewer bytes
  // across the racks.
  {
    const auto rack_text = insert_after(
      replace_once(text, (dir / "run").string(), (dir / "run-rack").string()),
      "  router_top_k: 2\n", "  rack_aware_alltoall: true\n");
    const auto rack_cfg = dir / "job-rack.yaml";
    write_text(rack_cfg, rack_text);
    run_job(rack_cfg, "rack-node");
    for (const char* field : {"loss", "aux_loss", "z_loss", "grad_norm"}) {
      INFO(field);
      const auto flat = metric_series(dir / "run" / "metrics.jsonl", field);
      CHECK(flat.size() == steps);
      CHECK(metric_series(dir / "run-rack" / "metrics.jsonl", field) == flat);
    }
    const auto inter = [&](const char* run) {
      std::ifstream in(dir / run / "metrics.jsonl");
      std::string line;
      double bytes = 0;
      std::smatch m;
      while (std::getline(in, line))
        if (std::regex_search(line, m, std::regex("\"inter_rack\":([0-9]+)")))
          bytes += std::stod(m[1]);
      return bytes;
    };
    INFO("inter_rack bytes: flat " << inter("run") << ", rack-aware "
                                   << inter("run-rack"));
    CHECK(inter("run-rack") < inter("run"));
  }
  // Every step's all-to-all bytes by link class add up to the total, and
  // the contiguous layout sends across the racks.
  {
    std::ifstream in(dir / "run" / "metrics.jsonl");
    std::string line;
    int seen = 0;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(
            line, m,
            std::regex("\"alltoall_bytes\":([0-9]+),\"alltoall_bytes_by_link\":"
                       "\\{\"same_rank\":([0-9]+),\"intra_node\":([0-9]+),"
                       "\"intra_rack\":([0-9]+),\"inter_rack\":([0-9]+)")))
        continue;
      ++seen;
      const long long total = std::stoll(m[2]) + std::stoll(m[3])
                              + std::stoll(m[4]) + std::stoll(m[5]);
      INFO(line);
      CHECK(total / 4 == std::stoll(m[1])); // alltoall_bytes: per rank
      CHECK(std::stoll(m[3]) == 0);         // one rank per node
      CHECK(std::stoll(m[4]) > 0);
      CHECK(std::stoll(m[5]) > 0);
    }
    CHECK(seen == steps);
  }
  auto stats = run(tutti_bin() + " experts stats " + (dir / "run").string()
                     + " --json " + (dir / "stats.json").string(),
                   60);
  INFO(stats.output);
  REQUIRE(stats.status == 0);
  auto plan = run(tutti_bin() + " placement plan " + cfg.string() + " --stats "
                    + (dir / "stats.json").string(),
                  60);
  INFO(plan.output);
  REQUIRE(plan.status == 0);
  CHECK(plan.output.find("4 nodes, 2 racks") != std::string::npos);
}

int main(int argc, char** argv) {
  return netns_test_main(argc, argv, why_not_available());
}
