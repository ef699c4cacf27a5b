// The gateway in front of two `tutti serve` replicas (real processes, real
// sockets): under load from several clients one replica is killed with
// SIGKILL. Requests that had sent nothing to their client go to the other
// replica (retried), those already streaming end with an error event,
// others with a clean status; nothing hangs. The replica restarted on its
// port rejoins: health check, circuit breaker closed, traffic again.

#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>

#include "gateway_test_support.hpp"
#include "tutti/gateway/gateway.hpp"
#include "tutti/security/api_keys.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

gateway::gateway_config two_replicas(int p1, int p2) {
  auto cfg = gateway::parse_gateway_config(
    "gateway:\n  listen: 127.0.0.1:0\n  request_timeout_s: 60\n"
    "  max_retries: 2\n  health_interval_s: 0.2\n  health_timeout_s: 2\n"
    "  breaker_failures: 2\n  breaker_open_s: 1\n"
    "stable:\n  version: tiny@v1\n  replicas: [127.0.0.1:"
      + std::to_string(p1) + ", 127.0.0.1:" + std::to_string(p2) + "]\n",
    "test");
  REQUIRE(cfg.ok());
  return cfg.value();
}

// Replicas a and b of `model` on ports base and base + 1 (config
// ROOT/serve.yaml, logs ROOT/a.log and ROOT/b.log), both listening.
struct replica_pair {
  serve_replica a, b;
  replica_pair(const std::filesystem::path& root,
               const std::filesystem::path& model, int base)
    : a{serve_config_file(root / "serve.yaml", model), root / "a.log", base,
        nullptr},
      b{root / "serve.yaml", root / "b.log", base + 1, nullptr} {
    a.start();
    b.start();
    REQUIRE(a.wait_listening(60));
    REQUIRE(b.wait_listening(60));
  }
};

struct tally {
  std::mutex m;
  int ok = 0, stream_errors = 0, clean_failures = 0, unclean = 0;
  std::vector<std::string> unclean_bodies;
  void add(const completion_result& r, bool stream) {
    std::lock_guard<std::mutex> lock(m);
    if (r.complete)
      ++ok;
    else if (stream && r.status == 200 && r.error_event
             && r.body.find("failed mid-stream") != std::string::npos)
      ++stream_errors;
    else if (r.status >= 500 && r.body.find("\"error\"") != std::string::npos)
      ++clean_failures;
    else {
      ++unclean;
      unclean_bodies.push_back(std::to_string(r.status) + " " + r.body);
    }
  }
};

} // namespace

TEST_CASE("a replica killed under load is routed around and rejoins",
          "[integration][fault]") {
  const auto root = scratch("gateway_failover");
  const auto model = gateway_model(root / "model", 5);
  replica_pair replicas(root, model, port_block(181, 2));
  auto& [a, b] = replicas;

  auto gw = gateway::gateway::start(two_replicas(a.port, b.port), nullptr);
  REQUIRE(gw.ok());
  auto& fleet = gw.value()->state();
  const int port = gw.value()->port();
  auto replicas_healthy = [&](int n) {
    std::lock_guard<std::mutex> lock(fleet.mutex);
    int up = 0;
    for (const auto& r : fleet.replicas)
      up += r->healthy;
    return up == n;
  };
  REQUIRE(wait_until([&] { return replicas_healthy(2); }, 30));

  // Eight clients, a quarter of them streaming, until told to stop: with
  // about four requests in flight on each replica, the killed one always
  // holds some that have sent nothing to their clients yet (with three of
  // six streaming, all of its requests were sometimes streams).
  std::atomic<bool> stop{false};
  tally before, after;
  std::atomic<bool> killed{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&, i] {
      const bool stream = i % 4 == 0;
      while (!stop) {
        auto r = complete(port, stream, 48, 60);
        (killed ? after : before).add(r, stream);
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  killed = true; // what ends from here on counts as after the kill
  a.kill9();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  // Routed around: requests after the kill settle on b.
  CHECK(wait_until([&] { return !replicas_healthy(2); }, 10));
  a.start();
  REQUIRE(a.wait_listening(60));
  // Rejoins: healthy, breaker closed, and taking requests again.
  int64_t a_requests = 0;
  {
    std::lock_guard<std::mutex> lock(fleet.mutex);
    a_requests = fleet.replicas[0]->requests;
  }
  CHECK(wait_until(
    [&] {
      std::lock_guard<std::mutex> lock(fleet.mutex);
      const auto& r = *fleet.replicas[0];
      return r.healthy
             && r.breaker.current() == gateway::circuit_breaker::state::closed
             && r.requests > a_requests + 3;
    },
    30));
  stop = true;
  // Every client ends: each request has a deadline, none hangs.
  const auto joined_by = std::chrono::steady_clock::now()
                         + std::chrono::seconds(90);
  for (auto& t : clients)
    t.join();
  CHECK(std::chrono::steady_clock::now() < joined_by);

  INFO("before: ok " << before.ok << ", after: ok " << after.ok
                     << " stream errors " << after.stream_errors
                     << " clean failures " << after.clean_failures
                     << " unclean " << after.unclean << "; first: "
                     << (before.unclean_bodies.empty()
                           ? (after.unclean_bodies.empty()
                                ? std::string()
                                : after.unclean_bodies.front())
                           : before.unclean_bodies.front()));
  CHECK(before.ok > 0);
  CHECK(before.unclean + before.stream_errors + before.clean_failures == 0);
  CHECK(after.ok > before.ok / 4);
  CHECK(after.unclean == 0);
  std::lock_guard<std::mutex> lock(fleet.mutex);
  // Requests in flight on the killed replica that had sent nothing to
  // their clients went to the other one.
  CHECK(fleet.retries > 0);
  bool saw_down = false, saw_up = false;
  for (const auto& e : fleet.events) {
    saw_down |= e.kind == "replica_down";
    saw_up |= e.kind == "replica_up";
  }
  CHECK(saw_down);
  CHECK(saw_up);
}

TEST_CASE("a stream whose replica dies after its first token ends with an "
          "error event",
          "[integration][fault]") {
  const auto root = scratch("gateway_midstream");
  // The medium shape: slow enough that most of 100 tokens are still to
  // come when the first one arrives.
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 256, 512, 4, 8, 4, 8, 2, 128), 9);
  replica_pair replicas(root, model, port_block(187, 2));
  auto& [a, b] = replicas;
  auto gw = gateway::gateway::start(two_replicas(a.port, b.port), nullptr);
  REQUIRE(gw.ok());
  auto& fleet = gw.value()->state();
  REQUIRE(wait_until(
    [&] {
      std::lock_guard<std::mutex> lock(fleet.mutex);
      return fleet.replicas[0]->healthy && fleet.replicas[1]->healthy;
    },
    30));

  httplib::Client c("127.0.0.1", gw.value()->port());
  c.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":[3,1,4,1,5],"max_tokens":100,"temperature":0,)"
             R"("stream":true})";
  req.set_header("Content-Type", "application/json");
  std::string replica, body;
  bool killed = false;
  req.response_handler = [&](const httplib::Response& r) {
    replica = r.get_header_value("X-Tutti-Replica");
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    body.append(d, n);
    if (!killed && body.find("\"choices\"") != std::string::npos) {
      killed = true; // the first token is here: its replica dies
      (replica == fleet.replicas[0]->id ? a : b).kill9();
    }
    return true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.send(req);
  const double took = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  INFO(body.substr(0, 2000));
  REQUIRE(r);
  CHECK(killed);
  CHECK(r->status == 200); // it had started: the status was sent
  CHECK(body.find("failed mid-stream") != std::string::npos);
  CHECK(body.find("\"code\":502") != std::string::npos);
  CHECK(body.rfind("data: [DONE]") != std::string::npos);
  CHECK(took < 30);
  // The next request goes to the replica that is left, and completes.
  auto next = complete(gw.value()->port(), true, 8, 60);
  CHECK(next.complete);
  CHECK(next.replica != replica);
}

TEST_CASE("the gateway checks API keys and their rates before any replica",
          "[integration][security]") {
  const auto root = scratch("gateway_keys");
  const auto model = gateway_model(root / "model", 5);
  const int base = port_block(189, 1);
  serve_replica a{serve_config_file(root / "serve.yaml", model),
                  root / "a.log", base, nullptr};
  a.start();
  REQUIRE(a.wait_listening(60));
  write_text(root / "keys.yaml",
             "rate_per_minute: 600\nkeys:\n  batch: {sha256: "
               + security::sha256_hex("batch-key") + ", rate_per_minute: 3}\n");
  auto cfg = gateway::parse_gateway_config(
    "gateway:\n  listen: 127.0.0.1:0\n  health_interval_s: 0.2\n"
    "  api_keys: " + (root / "keys.yaml").string()
      + "\nstable:\n  version: tiny@v1\n  replicas: [127.0.0.1:"
      + std::to_string(a.port) + "]\n",
    "test");
  REQUIRE(cfg.ok());
  auto gw = gateway::gateway::start(cfg.value(), nullptr);
  REQUIRE(gw.ok());
  auto& fleet = gw.value()->state();
  REQUIRE(wait_until(
    [&] {
      std::lock_guard<std::mutex> lock(fleet.mutex);
      return fleet.replicas[0]->healthy;
    },
    30));
  const int port = gw.value()->port();
  CHECK(complete(port, false, 4).status == 401);
  CHECK(complete(port, false, 4, 60, "wrong").status == 401);
  CHECK(complete(port, false, 4, 60, "batch-key").status == 200);
  int limited = 0;
  for (int i = 0; i < 5; ++i)
    limited += complete(port, false, 4, 60, "batch-key").status == 429;
  CHECK(limited >= 1);
  std::lock_guard<std::mutex> lock(fleet.mutex);
  // Refused at the gateway: the replica saw only the allowed requests.
  CHECK(fleet.replicas[0]->requests <= 3);
}

namespace {

struct test_child : gateway::launched_process {
  test_child(const std::vector<std::string>& argv,
             const std::filesystem::path& log)
    : child(argv, log) {}
  bool running() override { return child.running(); }
  child_process child;
};

} // namespace

TEST_CASE("a replica the gateway started is replaced when it dies",
          "[integration][fault]") {
  const auto root = scratch("gateway_supervise");
  const auto serve = serve_config_file(root / "serve.yaml",
                                       gateway_model(root / "model", 5));
  const int base = port_block(199, 4);
  std::mutex m;
  std::vector<std::shared_ptr<test_child>> started;
  int next_port = base;
  auto launch = [&](const std::string& config)
    -> expected<gateway::launched> {
    std::lock_guard<std::mutex> lock(m);
    const int port = next_port++;
    auto c = std::make_shared<test_child>(
      std::vector<std::string>{tutti_bin(), "serve", config, "--listen",
                               "127.0.0.1:" + std::to_string(port)},
      root / ("replica-" + std::to_string(port) + ".log"));
    started.push_back(c);
    return gateway::launched{{"127.0.0.1", static_cast<uint16_t>(port)}, c};
  };
  auto cfg = gateway::parse_gateway_config(
    "gateway:\n  listen: 127.0.0.1:0\n  health_interval_s: 0.2\n"
    "stable:\n  version: tiny@v1\n  serve_config: "
      + serve.string() + "\n  count: 2\n",
    "test");
  REQUIRE(cfg.ok());
  auto gw = gateway::gateway::start(cfg.value(), launch);
  REQUIRE(gw.ok());
  auto& fleet = gw.value()->state();
  auto healthy = [&] {
    std::lock_guard<std::mutex> lock(fleet.mutex);
    int n = 0;
    for (const auto& r : fleet.replicas)
      n += r->healthy;
    return n;
  };
  REQUIRE(wait_until([&] { return healthy() == 2; }, 60));
  {
    std::lock_guard<std::mutex> lock(m);
    started[0]->child.signal(SIGKILL);
  }
  auto replaced = [&] {
    std::lock_guard<std::mutex> lock(fleet.mutex);
    for (const auto& e : fleet.events)
      if (e.kind == "replica_exited")
        return true;
    return false;
  };
  CHECK(wait_until(replaced, 30));
  CHECK(wait_until([&] { return healthy() == 2; }, 60));
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(started.size() == 3);
  }
  auto r = complete(gw.value()->port(), true, 8);
  CHECK(r.complete);
  gw.value()->stop();
}
