#pragma once
// Helpers for tests that start `tuttid` daemons (and other programs) as
// child processes and talk to their ports. Every child is killed with
// SIGKILL and reaped when its handle goes out of scope, and also dies with
// the test process (PR_SET_PDEATHSIG), so no test leaves a daemon behind.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "test_support.hpp"

namespace tutti::testing {

inline std::string tuttid_bin() { return binary_dir() + "/apps/tuttid"; }

using tutti::child_process;

// tuttid --config CONFIG --node-rank N [ARGS...], optionally behind a
// prefix such as {"ip", "netns", "exec", "NS"} (which execs tuttid in
// place, same pid).
inline std::unique_ptr<child_process> start_daemon(
  const std::filesystem::path& config, int node_rank,
  const std::filesystem::path& log, const std::vector<std::string>& prefix = {},
  const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {tuttid_bin(), "--config", config.string(),
                           "--node-rank", std::to_string(node_rank)});
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<child_process>(argv, log);
}

// Polls `done` every 50 ms until it holds or `seconds` pass.
inline bool wait_until(const std::function<bool()>& done, double seconds) {
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// `tutti serve CONFIG` on the port the kernel picks (the config's
// `listen: 127.0.0.1:0`), its output in `log`: waits up to `seconds` for
// the log to name the port ("on http://127.0.0.1:PORT", https with `tls`).
struct serve_process {
  child_process process;
  std::string log_text; // the log when the port showed, or the wait ended
  int port = 0;         // 0: no port within `seconds`, or serve ended first

  serve_process(const std::filesystem::path& config,
                const std::filesystem::path& log, double seconds,
                bool tls = false)
    : process({tutti_bin(), "serve", config.string()}, log) {
    const std::regex listening(std::string(tls ? "on https" : "on http")
                               + "://127\\.0\\.0\\.1:([0-9]+)");
    std::smatch m;
    const auto found = [&] {
      return std::regex_search(log_text, m, listening);
    };
    wait_until(
      [&] {
        log_text = read_text(log);
        return found() || !process.running();
      },
      seconds);
    if (found())
      port = std::stoi(m[1].str());
  }
};

// Complete lines of a file (a metrics.jsonl being written counts only the
// lines that have their newline).
inline int count_lines(const std::filesystem::path& path) {
  auto text = read_text(path);
  int n = 0;
  for (char c : text)
    n += c == '\n';
  return n;
}

// True if `port` can be bound on 127.0.0.1 right now.
inline bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// Claims the block of ports at `base` for this process's lifetime: tests
// running at once (ctest -j) would otherwise both find a block free
// before either daemon binds it. A lock file per block, released when the
// process ends however it ends; not inherited by the daemons it starts.
inline bool claim_port_block(int base) {
  const auto path = std::filesystem::temp_directory_path()
                    / ("tutti-test-ports-" + std::to_string(base) + ".lock");
  int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
  if (fd < 0)
    return true; // no lock to be had: fall back to the bind check alone
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return false;
  }
  return true; // fd stays open: the claim lasts until the process exits
}

// `count` consecutive free ports, derived from the pid and `salt` (so tests
// of one file and concurrent runs differ), claimed for this process.
// 10000..19999: below the ephemeral range and away from test_daemons'
// 20000..39999.
inline int port_block(int salt, int count = 3) {
  int slot = static_cast<int>((getpid() * 7 + salt * 131) % 1000);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int base = 10000 + ((slot + attempt) % 1000) * 10;
    bool ok = true;
    for (int p = base; p < base + count && ok; ++p)
      ok = port_free(p);
    if (ok && claim_port_block(base))
      return base;
  }
  return 10000 + slot * 10;
}

// TUTTI_TEST_TLS=1 runs the daemon tests with mutual TLS: every config of
// daemon_config gets a security section (a CA and node certificates made
// once per test process by `tutti certs`), and the test process exports
// TUTTI_TLS_CA/CERT/KEY (an admin's certificate), so every `tutti` client
// it starts (status, chaos, shell, drill) connects as that admin.
inline bool tls_mode() {
  const char* v = std::getenv("TUTTI_TEST_TLS");
  return v && std::string(v) == "1";
}

// The security section of tls_mode's configs ("" when it is off).
inline std::string tls_mode_section() {
  if (!tls_mode())
    return "";
  static const std::string section = [] {
    const auto dir = std::filesystem::path(binary_dir()) / "test-scratch"
                     / ("tls-mode-pki-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    const auto d = dir.string(), certs = tutti_bin() + " certs ";
    for (const auto& args :
         {"init " + d, "issue --ca " + d + " --node 0",
          "issue --ca " + d + " --node 1", "issue --ca " + d + " --node 2",
          "issue --ca " + d + " --node 3",
          "issue --ca " + d + " --user tester --role admin"}) {
      auto r = run(certs + args, 60);
      INFO(r.output);
      REQUIRE(r.status == 0);
    }
    ::setenv("TUTTI_TLS_CA", (d + "/ca.crt").c_str(), 1);
    ::setenv("TUTTI_TLS_CERT", (d + "/user-tester.crt").c_str(), 1);
    ::setenv("TUTTI_TLS_KEY", (d + "/user-tester.key").c_str(), 1);
    return "security:\n  required: true\n  handshake_timeout_s: 2\n"
           "  tls:\n    ca: "
           + d + "/ca.crt\n    cert: " + d + "/node-{node}.crt\n    key: " + d
           + "/node-{node}.key\n";
  }();
  return section;
}

// A 2-node (world 4, 2 ranks per node, EP 4) daemon config on the tiny
// model of small_config. `hosts` gives each node's address (and so its
// Gloo bind address); the coordinator runs on hosts[0]:port and node N
// listens on hosts[N]:port + 1 + N.
inline std::string daemon_config(
  const std::string& data_dir, const std::string& run_dir, int port, int steps,
  const std::vector<std::string>& hosts = {"127.0.0.1", "127.0.0.1"},
  int join_timeout_s = 20) {
  auto text = small_config(data_dir, run_dir, 4, steps);
  const int nnodes = static_cast<int>(hosts.size());
  std::string cluster = "  nnodes: " + std::to_string(nnodes)
                        + "\n  nproc_per_node: " + std::to_string(4 / nnodes)
                        + "\n  coordinator: " + hosts[0] + ":"
                        + std::to_string(port) + "\n  join_timeout_s: "
                        + std::to_string(join_timeout_s) + "\n  nodes:\n";
  for (int n = 0; n < nnodes; ++n)
    cluster += "    - {host: " + hosts[n]
               + ", port: " + std::to_string(port + 1 + n) + ", rack: r"
               + std::to_string(n) + "}\n";
  const std::string from = "  nnodes: 1\n  nproc_per_node: 4\n";
  text.replace(text.find(from), from.size(), cluster);
  return text + tls_mode_section();
}

// The same job in one process (`tutti run`): 4 ranks on one node.
inline std::string one_process_config(const std::string& data_dir,
                                      const std::string& run_dir, int steps) {
  return small_config(data_dir, run_dir, 4, steps);
}

// Runs the job of `one_process_config` in DIR/one (`tutti run`), which must
// succeed; returns its metrics.jsonl.
inline std::filesystem::path run_one_process(const std::filesystem::path& dir,
                                             const std::filesystem::path& data,
                                             int steps) {
  run_job(dir / "one.yaml",
          one_process_config(data.string(), (dir / "one").string(), steps));
  return dir / "one" / "metrics.jsonl";
}

// Runs a 2-node job to its end, node 1's daemon started first, logs in
// DIR/node0.log and DIR/node1.log (`prefix`: per node, as start_daemon's);
// both must exit 0.
inline void run_two_daemons(const std::filesystem::path& config,
                            const std::filesystem::path& dir,
                            const std::vector<std::string>& prefix0 = {},
                            const std::vector<std::string>& prefix1 = {}) {
  auto node1 = start_daemon(config, 1, dir / "node1.log", prefix1);
  auto node0 = start_daemon(config, 0, dir / "node0.log", prefix0);
  int s0 = node0->wait(300), s1 = node1->wait(60);
  INFO("node0: " << tail(read_text(dir / "node0.log")));
  INFO("node1: " << tail(read_text(dir / "node1.log")));
  REQUIRE(s0 == 0);
  REQUIRE(s1 == 0);
}

// Both runs have `steps` losses, each within `relative` of the other's.
inline void check_losses_close(const std::filesystem::path& reference_metrics,
                               const std::filesystem::path& metrics,
                               size_t steps, double relative) {
  auto a = metric_series(reference_metrics, "loss");
  auto b = metric_series(metrics, "loss");
  REQUIRE(a.size() == steps);
  REQUIRE(b.size() == steps);
  for (size_t s = 0; s < a.size(); ++s) {
    INFO("step " << s + 1 << ": " << b[s] << " vs " << a[s]);
    CHECK(std::abs(b[s] - a[s]) / std::abs(a[s]) <= relative);
  }
}

// -- raw TCP clients for poking at daemon ports -----------------------------

// Connects within `timeout_ms`; -1 on failure.
inline int tcp_connect(const std::string& host, int port,
                       int timeout_ms = 2000) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    close(fd);
    return -1;
  }
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (rc != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, timeout_ms) != 1
        || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

// The 32-byte BASP header of CAF 0.17 (network byte order): operation,
// 2 padding bytes, flags, payload length, operation data, source and
// destination actor ids. basp_header(1, 0, 1), a client handshake
// announcing no payload, crashes an unguarded CAF 0.17.6 middleman.
inline std::string basp_header(uint8_t operation, uint32_t payload_len,
                               uint64_t operation_data) {
  std::string h(32, '\0');
  h[0] = static_cast<char>(operation);
  for (int i = 0; i < 4; ++i)
    h[4 + i] = static_cast<char>((payload_len >> (24 - 8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i)
    h[8 + i] = static_cast<char>((operation_data >> (56 - 8 * i)) & 0xff);
  return h;
}

// Sends all of `data` within `timeout_ms`; false if the peer closed or the
// deadline passed (a peer that stops reading is not our problem here).
inline bool send_bytes(int fd, const std::string& data, int timeout_ms = 2000) {
  size_t done = 0;
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::milliseconds(timeout_ms);
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      return false;
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, static_cast<int>(left));
  }
  return true;
}

// Reads what arrives within `timeout_ms` (stops at EOF or `max` bytes).
inline std::string recv_for(int fd, int timeout_ms, size_t max = 1 << 16) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (out.size() < max) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) != 1)
      break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A socket closed when it goes out of scope.
struct socket_guard {
  int fd = -1;
  explicit socket_guard(int f = -1) : fd(f) {}
  socket_guard(socket_guard&& o) noexcept : fd(o.fd) { o.fd = -1; }
  socket_guard& operator=(socket_guard&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  socket_guard(const socket_guard&) = delete;
  ~socket_guard() {
    if (fd >= 0)
      close(fd);
  }
};

// GET http://127.0.0.1:port/metrics: the body of a 200 answer.
inline std::string scrape_metrics(int port) {
  socket_guard s(tcp_connect("127.0.0.1", port));
  REQUIRE(s.fd >= 0);
  REQUIRE(send_bytes(s.fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto reply = recv_for(s.fd, 3000, 1 << 22);
  REQUIRE(reply.find("200 OK") != std::string::npos);
  return reply.substr(reply.find("\r\n\r\n") + 4);
}

// scrape_metrics(port), saved as DIR/scrape.txt, which promtool must pass.
inline std::string scrape_checked_by_promtool(
  int port, const std::filesystem::path& dir) {
  auto body = scrape_metrics(port);
  write_text(dir / "scrape.txt", body);
  auto check = run("promtool check metrics < " + (dir / "scrape.txt").string(),
                   30);
  INFO(body << check.output);
  CHECK(check.status == 0);
  return body;
}

// `tutti run CONFIG --quiet` in the background, its output in `log`, once
// `metrics` (its metrics.jsonl) has `steps` lines (2 minutes at most).
inline std::unique_ptr<child_process> start_job(
  const std::filesystem::path& config, const std::filesystem::path& log,
  const std::filesystem::path& metrics, int steps) {
  auto job = std::make_unique<child_process>(
    std::vector<std::string>{tutti_bin(), "run", config.string(), "--quiet"},
    log);
  REQUIRE(wait_until([&] { return count_lines(metrics) >= steps; }, 120));
  return job;
}

} // namespace tutti::testing
