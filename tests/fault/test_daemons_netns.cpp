// Two node daemons on two "hosts": each tuttid runs in its own network
// namespace (10.210.0.1/24 and 10.210.0.2/24, joined by a veth pair), so
// the coordinator, the node ports and Gloo all cross a real (virtual) link
// and nothing can sneak through a shared loopback. Their 30-step loss curve
// must equal the same job in one process (4 ranks) to 1e-4 relative.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and `ip`. Where the machine
// does not allow `ip netns add`, it prints why and exits 77, which CTest
// reports as skipped (SKIP_RETURN_CODE), never as passed.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <regex>

#include "fault_support.hpp"
#include "netns_main.hpp"

using namespace tutti::testing;

namespace {

std::string quote(const std::string& s) { return "'" + s + "'"; }

command_result sh(const std::string& command, int seconds = 20) {
  return run(command, seconds);
}

// Namespaces named after our pid, so concurrent runs do not collide and
// leftovers of a killed run can be recognized and removed.
struct netns_names {
  std::string a, b, veth_a, veth_b;
  explicit netns_names(pid_t pid) {
    auto p = std::to_string(pid);
    a = "tutti-a-" + p;
    b = "tutti-b-" + p;
    veth_a = "tva" + p; // interface names: at most 15 characters
    veth_b = "tvb" + p;
  }
};

// Deletes namespaces left by runs of this test whose process is gone.
void remove_stale_namespaces() {
  auto list = sh("ip netns list");
  std::regex re("^(tutti-[ab]-([0-9]+))");
  std::istringstream in(list.output);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, re))
      continue;
    pid_t pid = static_cast<pid_t>(std::stol(m[2]));
    if (pid == getpid() || (kill(pid, 0) != 0 && errno == ESRCH))
      sh("ip netns del " + quote(m[1]));
  }
}

// Both namespaces and the veth pair; removed in the destructor, on every
// path (deleting a namespace destroys the veth end in it and so its peer).
class netns_pair {
public:
  explicit netns_pair(netns_names n) : n_(std::move(n)) {}
  netns_pair(const netns_pair&) = delete;
  netns_pair& operator=(const netns_pair&) = delete;
  ~netns_pair() { teardown(); }

  // "" on success, else the failing command and its output.
  std::string setup() {
    const std::vector<std::string> steps = {
      "ip netns add " + n_.a,
      "ip netns add " + n_.b,
      "ip link add " + n_.veth_a + " type veth peer name " + n_.veth_b,
      "ip link set " + n_.veth_a + " netns " + n_.a,
      "ip link set " + n_.veth_b + " netns " + n_.b,
      "ip -n " + n_.a + " addr add 10.210.0.1/24 dev " + n_.veth_a,
      "ip -n " + n_.b + " addr add 10.210.0.2/24 dev " + n_.veth_b,
      "ip -n " + n_.a + " link set lo up",
      "ip -n " + n_.b + " link set lo up",
      "ip -n " + n_.a + " link set " + n_.veth_a + " up",
      "ip -n " + n_.b + " link set " + n_.veth_b + " up",
    };
    for (const auto& c : steps) {
      if (c.rfind("ip netns add ", 0) == 0)
        created_ = true;
      auto r = sh(c);
      if (r.status != 0)
        return c + ": " + r.output;
    }
    return "";
  }

  void teardown() {
    if (!created_)
      return;
    sh("ip netns del " + n_.a);
    sh("ip netns del " + n_.b);
    sh("ip link del " + n_.veth_a + " 2>/dev/null");
    created_ = false;
  }

  std::vector<std::string> exec_in(int node) const {
    return {"ip", "netns", "exec", node == 0 ? n_.a : n_.b};
  }
  const netns_names& names() const { return n_; }

private:
  netns_names n_;
  bool created_ = false;
};

// Why this machine cannot run the test, or "" if it can: root, `ip`, and
// an `ip netns add` that works (a container without CAP_SYS_ADMIN gets
// EPERM here).
std::string why_not_available() {
  if (geteuid() != 0)
    return "not root (uid " + std::to_string(geteuid())
           + "): `ip netns add` and veth pairs need CAP_SYS_ADMIN and "
             "CAP_NET_ADMIN";
  if (sh("ip -V").status != 0)
    return "`ip` (iproute2) is not installed";
  remove_stale_namespaces();
  const std::string probe = "tutti-probe-" + std::to_string(getpid());
  auto r = sh("ip netns add " + probe);
  sh("ip netns del " + probe + " 2>/dev/null");
  if (r.status != 0)
    return "`ip netns add` is not allowed here: " + r.output;
  const std::string va = "tvp" + std::to_string(getpid());
  auto v = sh("ip link add " + va + " type veth peer name " + va + "x");
  sh("ip link del " + va + " 2>/dev/null");
  if (v.status != 0)
    return "cannot create a veth pair: " + v.output;
  return "";
}

} // namespace

TEST_CASE("2 daemons in separate network namespaces train like 4 ranks in "
          "one process",
          "[integration]") {
  const int steps = 30;
  auto dir = scratch("daemons_netns");
  auto data = dir / "data";
  require_synth_data(data);

  // The reference: one process, 4 ranks, Gloo on 127.0.0.1.
  auto one = run_one_process(dir, data, steps);

  netns_pair ns{netns_names(getpid())};
  auto failed = ns.setup();
  INFO(failed);
  REQUIRE(failed.empty());

  auto two = dir / "two.yaml";
  write_text(two,
             daemon_config(data.string(), (dir / "two").string(), port_block(9),
                           steps, {"10.210.0.1", "10.210.0.2"}));
  // The daemons live inside run_two_daemons: on any exit they are killed
  // before the namespaces are deleted.
  run_two_daemons(two, dir, ns.exec_in(0), ns.exec_in(1));

  // They really were apart: node 1's namespace has no route to anything
  // but 10.210.0.0/24 (and its own loopback).
  auto routes = sh("ip -n " + ns.names().b + " -4 route show");
  INFO(routes.output);
  CHECK(routes.output.find("default") == std::string::npos);

  check_losses_close(one, dir / "two" / "metrics.jsonl", steps, 1e-4);
}

TEST_CASE("a node cut off by its link is detected, comes back and the job "
          "resumes",
          "[link_cut]") {
  netns_pair ns{netns_names(getpid())};
  auto failed = ns.setup();
  INFO(failed);
  REQUIRE(failed.empty());
  fault_job job("netns_link_cut", 100, 93, "", {"10.210.0.1", "10.210.0.2"});
  job.run_reference();
  auto node1 = job.daemon(1, "node1.log", ns.exec_in(1));
  auto node0 = job.daemon(0, "node0.log", ns.exec_in(0));
  job.wait_for_random_step(12, 60);
  const auto& n = ns.names();
  REQUIRE(sh("ip -n " + n.a + " link set " + n.veth_a + " down").status == 0);
  // No FIN, no RST: only the missing heartbeats (timeout 1 s) tell.
  double detect = job.seconds_until("node0.log", "job interrupted", 10);
  INFO("detected after " << detect << " s");
  CHECK(detect >= 0);
  CHECK(detect <= 1.0 + 0.5);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  REQUIRE(sh("ip -n " + n.a + " link set " + n.veth_a + " up").status == 0);
  double back = job.seconds_until("job/tuttid-0.log.jsonl", "training resumed",
                                  30);
  INFO("training again " << back << " s after the link came back");
  CHECK(back >= 0);
  CHECK(back <= 15);
  int s0 = node0->wait(300), s1 = node1->wait(60);
  INFO("node0: " << tail(read_text(job.dir / "node0.log")));
  INFO("node1: " << tail(read_text(job.dir / "node1.log")));
  CHECK(s0 == 0);
  CHECK(s1 == 0);
  job.check_losses();
}

int main(int argc, char** argv) {
  return netns_test_main(argc, argv, why_not_available());
}
