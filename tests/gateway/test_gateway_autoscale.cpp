// Autoscaling through `tutti gateway`: one serving replica and a warm
// spare; queue pressure from `tutti bench serve` puts the spare to work
// (a scale-up, its first request logged) and a new spare is started;
// idleness afterwards takes the added replica out of service again.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "gateway_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

nlohmann::json status_of(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(10, 0);
  auto r = c.Get("/admin/status");
  if (!r || r->status != 200)
    return nullptr;
  return nlohmann::json::parse(r->body);
}

int count_role(const nlohmann::json& s, const std::string& role,
               bool healthy_only = false) {
  int n = 0;
  for (const auto& r : s["replicas"])
    n += r["role"] == role && (!healthy_only || r["healthy"].get<bool>());
  return n;
}

} // namespace

TEST_CASE("queue pressure adds a replica from a warm spare, idleness "
          "removes it",
          "[integration]") {
  const auto root = scratch("gateway_autoscale");
  const auto serve = serve_config_file(root / "serve.yaml",
                                       gateway_model(root / "model", 5));
  const int port = port_block(197, 1);
  write_text(root / "gateway.yaml",
             "gateway:\n  health_interval_s: 0.2\n"
             "stable:\n  version: tiny@v1\n  serve_config: "
               + serve.string()
               + "\nautoscale:\n  min_replicas: 1\n  max_replicas: 2\n"
                 "  warm_spares: 1\n  scale_up_queue: 2\n"
                 "  scale_up_after_s: 1\n  scale_down_idle_s: 3\n");
  child_process gw({tutti_bin(), "gateway", (root / "gateway.yaml").string(),
                    "--listen", "127.0.0.1:" + std::to_string(port),
                    "--replica-logs", (root / "replicas").string()},
                   root / "gateway.log");
  INFO(read_text(root / "gateway.log"));
  REQUIRE(wait_until(
    [&] {
      auto s = status_of(port);
      return !s.is_null() && count_role(s, "serving", true) == 1
             && count_role(s, "spare", true) == 1;
    },
    60));

  // Queue pressure: 12 streams at once against one replica, for several
  // seconds (300 requests took about 1 s, too close to scale_up_after_s).
  child_process bench({tutti_bin(), "bench", "serve", "--url",
                       "http://127.0.0.1:" + std::to_string(port),
                       "--requests", "1000", "--concurrency", "12",
                       "--prompt-tokens", "16", "--output-tokens", "64",
                       "--vocab", "64", "--no-progress"},
                      root / "bench.log");
  const bool scaled_up = wait_until(
    [&] {
      auto s = status_of(port);
      return !s.is_null() && s["scale_ups"].get<int>() >= 1
             && count_role(s, "serving") == 2;
    },
    45);
  INFO(read_text(root / "bench.log"));
  CHECK(scaled_up);
  CHECK(bench.wait(120) == 0);
  auto log = read_text(root / "gateway.log");
  CHECK(log.find("scale_up: warm spare") != std::string::npos);
  CHECK(log.find("took_traffic") != std::string::npos);
  // A new spare replaces the one put to work.
  CHECK(wait_until(
    [&] {
      auto s = status_of(port);
      return !s.is_null() && count_role(s, "spare", true) >= 1;
    },
    60));
  // Idle: back to one serving replica.
  CHECK(wait_until(
    [&] {
      auto s = status_of(port);
      return !s.is_null() && s["scale_downs"].get<int>() >= 1
             && count_role(s, "serving") == 1;
    },
    30));
  gw.signal(SIGTERM);
  CHECK(gw.wait(30) == 0);
}
