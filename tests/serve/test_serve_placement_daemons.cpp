// Placement and offload across tuttid daemons: a replica of 2 daemons whose
// experts sit where a shuffled plan says (serve.placement), and one of 3
// daemons whose rare experts are offloaded to node 2 (serve.offload, 4
// experts over 3 nodes), answer every request with the tokens and
// log-probabilities of `tutti serve` in one process with the contiguous
// placement, as does one of 2 daemons whose experts move between racks
// while it serves (serve.replan), and one of 4 daemons in 2 racks with the
// rack-aware all-to-all (fewer bytes across racks), and the same 4 with
// every daemon holding sequences (serve.data_parallel_attention), which
// also refuses daemons whose caches differ and stops being ready when one
// dies. `tutti experts stats HOST:PORT --json` writes a replica's
// load for serve.offload; a plan that does not fit is refused naming
// serve.placement, exit 2.

#include <catch2/catch.hpp>

#include <httplib.h>

#include <algorithm>
#include <thread>

#include "daemon_support.hpp"
#include "serve_http_support.hpp"
#include "serve_test_support.hpp"
#include "tutti/placement/plan.hpp"
#include "tutti/placement/routing_stats.hpp"

using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string cluster(int nodes, int rendezvous) {
  std::string list;
  for (int i = 0; i < nodes; ++i)
    list += std::string(i ? ", " : "") + "127.0.0.1";
  return "  nodes: [" + list
         + "]\n  rendezvous_port: " + std::to_string(rendezvous) + "\n";
}

// Greedy and seeded requests of several lengths, all at once; each answer.
std::vector<json> answers(int port) {
  std::vector<json> out(6);
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] {
      json body = {{"prompt", std::string("experts placed ") + char('a' + i)
                                + std::string(i * 5, 'y')},
                   {"max_tokens", 12},
                   {"logprobs", 1},
                   {"temperature", i % 2 ? 0.9 : 0.0},
                   {"seed", 200 + i}};
      auto r = local_client(port).Post("/v1/completions", body.dump(),
                                       "application/json");
      out[i] = r && r->status == 200
                 ? json::parse(r->body)["choices"][0]
                 : json{
                   {"failed", r ? r->body : httplib::to_string(r.error())}};
    });
  for (auto& t : threads)
    t.join();
  return out;
}

void check_same(const std::vector<json>& got, const std::vector<json>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("request " << i << ": " << got[i].dump() << " vs " << want[i].dump());
    REQUIRE(want[i].contains("logprobs"));
    CHECK(got[i] == want[i]);
  }
}

// The value of the sample `key` (its name and labels, then a space) in a
// /metrics page.
int64_t sample_of(const std::string& metrics, const std::string& key) {
  const auto at = metrics.find(key);
  REQUIRE(at != std::string::npos);
  return std::stoll(metrics.substr(at + key.size()));
}

// Starts `nodes` daemons on `config` (the last first), waits for node 0's
// port to be ready and returns the answers; the daemons stop on return.
// With `metrics`, node 0's /metrics once `settled_key`'s value (when one is
// named) reads the same twice 1 s apart: other daemons' counts reach it
// with their next step header (the idle keep-alive, every second).
std::vector<json> serve_on_daemons(const fs::path& config, int nodes,
                                   int port, const std::string& name,
                                   std::string* metrics = nullptr,
                                   const std::string& settled_key = "") {
  const auto dir = config.parent_path();
  std::vector<std::unique_ptr<child_process>> daemons;
  for (int n = nodes - 1; n >= 0; --n)
    daemons.push_back(start_daemon(
      config, n, dir / (name + "_node" + std::to_string(n) + ".log")));
  if (!wait_until([&] { return serve_ready(port); }, 60))
    FAIL(name << " not ready within 60 s; node 0: "
              << read_text(dir / (name + "_node0.log")));
  auto out = answers(port);
  if (metrics) {
    auto value_of = [&](const std::string& body) {
      const auto at = body.find(settled_key);
      return at == std::string::npos ? std::string()
                                     : body.substr(at, body.find('\n', at) - at);
    };
    std::string before;
    for (int attempt = 0; attempt < 10; ++attempt) {
      auto r = local_client(port).Get("/metrics");
      REQUIRE(r);
      *metrics = r->body;
      if (settled_key.empty()
          || (attempt > 0 && value_of(*metrics) == before))
        break;
      before = value_of(*metrics);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  return out;
}

// The whole replica's inter-rack all-to-all bytes in node 0's /metrics.
const std::string inter_rack_key =
  "tutti_serve_alltoall_bytes_total{model=\"model\",link=\"inter_rack\"} ";

} // namespace

TEST_CASE("placement and offload across daemons serve the contiguous tokens",
          "[integration]") {
  auto root = scratch("serve_placement_daemons");
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 64, 128, 2, 4, 2, 4, 2, 128), 59);
  const int base = port_block(601, 5);
  const int one_port = base, plan_port = base + 1, plan_rdv = base + 2,
            off_port = base + 3, off_rdv = base + 4;

  write_text(root / "one.yaml", serve_yaml(model, one_port, ""));
  child_process one({tutti_bin(), "serve", (root / "one.yaml").string()},
                    root / "one.log");
  if (!wait_until([&] { return serve_ready(one_port); }, 30))
    FAIL("one process not ready; " << read_text(root / "one.log"));
  const auto alone = answers(one_port);

  // The one process's load, as serve.offload reads it.
  auto stats = run(tutti_bin()
                     + " experts stats 127.0.0.1:" + std::to_string(one_port)
                     + " --json " + (root / "stats.json").string(),
                   60);
  INFO(stats.output);
  REQUIRE(stats.status == 0);
  auto parsed = placement::routing_stats::from_json(
    read_text(root / "stats.json"));
  REQUIRE(parsed.ok());
  CHECK(parsed.value().layers == 2);
  CHECK(parsed.value().experts == 4);
  CHECK(parsed.value().tokens > 0);

  // Serves over 4 daemons in racks a a b b with `keys` added to the serve
  // section, checks the tokens against the one process's and returns node
  // 0's /metrics once they hold the whole group's inter-rack bytes.
  auto serve_in_two_racks = [&](const std::string& name,
                                const std::string& keys) {
    write_text(root / (name + ".yaml"),
               serve_yaml(model, plan_port,
                          cluster(4, plan_rdv) + "  racks: [a, a, b, b]\n"
                            + keys));
    std::string metrics;
    check_same(serve_on_daemons(root / (name + ".yaml"), 4, plan_port, name,
                                &metrics, inter_rack_key),
               alone);
    return metrics;
  };

  SECTION("a shuffled plan over 2 daemons") {
    auto plan = placement::placement_plan::contiguous(2, 4, 2);
    plan.expert_at = {3, 0, 2, 1, 1, 2, 0, 3};
    REQUIRE(plan.check().ok());
    REQUIRE(plan.write(root / "plan.json").ok());
    write_text(root / "plan.yaml",
               serve_yaml(model, plan_port,
                          cluster(2, plan_rdv) + "  placement: "
                            + (root / "plan.json").string() + "\n"));
    check_same(serve_on_daemons(root / "plan.yaml", 2, plan_port, "plan"),
               alone);
  }

  SECTION("experts replanned live by rack over 2 daemons") {
    // Node 0 holds every sequence: experts move to its rack as far as its
    // share of them allows, node 0's rank sending each new layout to node
    // 1 between steps.
    write_text(
      root / "replan.yaml",
      serve_yaml(model, plan_port,
                 cluster(2, plan_rdv)
                   + "  racks: [a, b]\n  replan: "
                     "{max_cross_rack_share: 0.01, window_steps: 1}\n"));
    std::string metrics;
    check_same(
      serve_on_daemons(root / "replan.yaml", 2, plan_port, "replan", &metrics),
      alone);
    CHECK(metrics.find("tutti_serve_expert_replans_total{model=\"model\"} 0\n")
          == std::string::npos);
    CHECK(metrics.find("tutti_serve_expert_replans_total")
          != std::string::npos);
    // Each daemon holds only its own experts: node 0 read those moved to
    // it from the model's directory.
    CHECK(sample_of(metrics,
                    "tutti_serve_expert_loaded_bytes_total{model=\"model\"} ")
          > 0);
  }

  SECTION("the rack-aware all-to-all over 4 daemons in 2 racks") {
    // Every sequence is node 0's (rack a); a token whose 2 experts are on
    // nodes 2 and 3 crosses to rack b once. The other daemons' bytes reach
    // node 0's /metrics with its next step header (the idle keep-alive).
    auto inter_rack = [&](bool rack_aware) {
      return sample_of(
        serve_in_two_racks(rack_aware ? "rack_aware" : "flat",
                           std::string("  rack_aware_alltoall: ")
                             + (rack_aware ? "true" : "false") + "\n"),
        inter_rack_key);
    };
    const auto flat = inter_rack(false);
    const auto relayed = inter_rack(true);
    INFO("inter-rack bytes: flat " << flat << ", rack-aware " << relayed);
    CHECK(flat > 0);
    CHECK(relayed < flat);
  }

  SECTION("every daemon holding sequences over 4 daemons in 2 racks") {
    // serve.data_parallel_attention: node 0's scheduler spreads the
    // requests over the 4 daemons' ranks, each runs attention for its own
    // and node 0 gathers their logits; flat and through the rack relays
    // (tokens now start in both racks), the tokens of one process.
    for (const bool rack_aware : {false, true}) {
      const std::string name = rack_aware ? "dp_rack_aware" : "dp_flat";
      const auto metrics = serve_in_two_racks(
        name, std::string("  data_parallel_attention: true\n"
                          "  rack_aware_alltoall: ")
                + (rack_aware ? "true" : "false") + "\n");
      INFO(name << ": " << metrics);
      int64_t on_others = 0;
      for (int r = 1; r < 4; ++r)
        on_others += sample_of(metrics,
                               "tutti_serve_requests_placed_on_rank_total"
                               "{model=\"model\",rank=\""
                                 + std::to_string(r) + "\"} ");
      CHECK(on_others > 0);
    }
  }

  SECTION("rare experts offloaded to node 2 of 3") {
    // Layer 0's expert 1 and layer 1's expert 0 are rare.
    auto st = placement::routing_stats::zeros(2, 4, 2);
    st.load = {100, 3, 100, 100, 2, 100, 100, 100};
    write_text(root / "rare.json", st.to_json());
    write_text(root / "offload.yaml",
               serve_yaml(model, off_port,
                          cluster(3, off_rdv) + "  offload: {stats: "
                            + (root / "rare.json").string()
                            + ", threshold: 0.05, rank: 2}\n"));
    std::string metrics;
    check_same(
      serve_on_daemons(root / "offload.yaml", 3, off_port, "offload", &metrics),
      alone);
    CHECK(metrics.find("tutti_serve_offloaded_experts{model=\"model\"} 2\n")
          != std::string::npos);
    CHECK(metrics.find("tutti_serve_offloaded_expert_rows_total")
          != std::string::npos);
  }
}

TEST_CASE("tutti serve refuses a plan for other ranks: serve.placement, exit 2",
          "[integration]") {
  auto root = scratch("serve_placement_refused");
  write_random_export(root / "model",
                      serve_test_config(256, 64, 128, 2, 4, 2, 4, 2, 128), 59);
  REQUIRE(placement::placement_plan::contiguous(2, 4, 4)
            .write(root / "plan.json")
            .ok());
  write_text(root / "serve.yaml",
             serve_yaml(root / "model", 0,
                        "  ep_size: 2\n  placement: "
                          + (root / "plan.json").string() + "\n"));
  auto r = run(tutti_bin() + " serve " + (root / "serve.yaml").string(), 60);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("serve.placement: ") != std::string::npos);
  CHECK(r.output.find("on 4 ranks") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
}

namespace {

// ROOT/model and the serve config of 2 daemons on loopback that both hold
// sequences, HTTP on `port`, the rendezvous on port + 1.
std::string two_daemons_holding_sequences(const fs::path& root, int port) {
  write_random_export(root / "model",
                      serve_test_config(256, 64, 128, 2, 4, 2, 4, 2, 128), 59);
  return serve_yaml(root / "model", port,
                    cluster(2, port + 1) + "  data_parallel_attention: true\n");
}

} // namespace

TEST_CASE("daemons whose serve configs differ are told which key, and do "
          "not serve",
          "[integration]") {
  // Node 0 hands out the KV blocks of every daemon's ranks
  // (serve.data_parallel_attention): a daemon with another cache size
  // would get blocks it does not have.
  auto root = scratch("serve_daemons_disagree");
  const int base = port_block(611, 2);
  const auto node0 = two_daemons_holding_sequences(root, base);
  auto node1 = node0;
  const std::string kv = "kv_cache_bytes: 4MiB";
  REQUIRE(node1.find(kv) != std::string::npos);
  node1.replace(node1.find(kv), kv.size(), "kv_cache_bytes: 2MiB");
  write_text(root / "node0.yaml", node0);
  write_text(root / "node1.yaml", node1);
  auto daemon1 = start_daemon(root / "node1.yaml", 1, root / "node1.log");
  auto daemon0 = start_daemon(root / "node0.yaml", 0, root / "node0.log");
  const int status = daemon1->wait(60);
  const auto log1 = read_text(root / "node1.log");
  INFO("node 1: " << log1 << "\nnode 0: " << read_text(root / "node0.log"));
  CHECK(status > 0);
  CHECK(log1.find("rank 1's KV cache blocks (serve.kv_cache_bytes): ")
        != std::string::npos);
  CHECK(log1.find("every daemon needs the same serve config")
        != std::string::npos);
  CHECK_FALSE(serve_ready(base));
}

TEST_CASE("a daemon holding sequences that dies: node 0 stops being ready "
          "and a request fails in bounded time",
          "[integration]") {
  auto root = scratch("serve_daemons_dp_lost");
  const int base = port_block(613, 2);
  write_text(root / "dp.yaml", two_daemons_holding_sequences(root, base));
  auto node1 = start_daemon(root / "dp.yaml", 1, root / "node1.log");
  auto node0 = start_daemon(root / "dp.yaml", 0, root / "node0.log");
  INFO("node 0: " << read_text(root / "node0.log"));
  REQUIRE(wait_until([&] { return serve_ready(base); }, 60));
  // Both daemons hold sequences: six requests at once reach node 1 too.
  for (const auto& a : answers(base))
    REQUIRE(a.contains("logprobs"));
  node1.reset(); // killed
  const auto asked = std::chrono::steady_clock::now();
  json body = {{"prompt", "after the loss"}, {"max_tokens", 8}};
  auto r = local_client(base).Post("/v1/completions", body.dump(),
                                   "application/json");
  CHECK((!r || r->status != 200));
  CHECK(std::chrono::steady_clock::now() - asked < std::chrono::seconds(30));
  CHECK(wait_until([&] { return !serve_ready(base); }, 15));
}
