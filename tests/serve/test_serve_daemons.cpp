// The same service across two `tuttid` daemons from one config (serve.nodes:
// one rank each, the experts split between them, dispatch and combine over
// Gloo between the processes) answers every request with the tokens and
// log-probabilities of `tutti serve` in one process: greedy and seeded
// sampling, sent concurrently by a real HTTP client; a Mixtral and a
// Qwen3-MoE model. When node 1 dies, node 0 reports not ready and a request
// gets an error, not a hang.

#include <catch2/catch.hpp>

#include <httplib.h>

#include <thread>

#include "daemon_support.hpp"
#include "serve_http_support.hpp"
#include "serve_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The requests: prompts of several lengths, greedy and seeded sampling.
std::vector<json> requests() {
  std::vector<json> out;
  for (int i = 0; i < 6; ++i) {
    json body = {{"prompt", std::string("tutti serves ") + char('a' + i)
                              + std::string(i * 5, 'x')},
                 {"max_tokens", 12},
                 {"logprobs", 1}};
    if (i % 2) {
      body["temperature"] = 0.9;
      body["seed"] = 100 + i;
    } else {
      body["temperature"] = 0;
    }
    out.push_back(body);
  }
  return out;
}

// Every request at once; each answer's text, tokens and log-probabilities.
std::vector<json> answers(int port) {
  const auto bodies = requests();
  std::vector<json> out(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] {
      auto r = local_client(port).Post("/v1/completions", bodies[i].dump(),
                                       "application/json");
      if (r && r->status == 200)
        out[i] = json::parse(r->body)["choices"][0];
      else
        out[i] = {{"failed", r ? r->body : httplib::to_string(r.error())}};
    });
  for (auto& t : threads)
    t.join();
  return out;
}

} // namespace

TEST_CASE("2 tuttid daemons x 1 rank with the experts split serve as 1 process",
          "[integration]") {
  // A Mixtral, and a Qwen3-MoE (QK-norm, heads of 24: 4 x 24 != 64, gates
  // without renormalisation).
  const bool qwen3 = GENERATE(false, true);
  INFO((qwen3 ? "Qwen3-MoE" : "Mixtral"));
  auto root = scratch(qwen3 ? "serve_daemons_qwen3" : "serve_daemons");
  const auto model = write_random_export(
    root / "model",
    qwen3 ? qwen3_test_config(256, 64, 128, 2, 4, 2, 24, 4, 2, 128, false)
          : serve_test_config(256, 64, 128, 2, 4, 2, 4, 2, 128),
    53);
  const int base = port_block(qwen3 ? 54 : 53, 3);
  const int one_port = base, two_port = base + 1, rendezvous = base + 2;

  write_text(root / "one.yaml", serve_yaml(model, one_port, ""));
  write_text(root / "two.yaml",
             serve_yaml(model, two_port,
                        "  nodes: [127.0.0.1, 127.0.0.1]\n"
                        "  rendezvous_port: "
                          + std::to_string(rendezvous) + "\n"));
  child_process one({tutti_bin(), "serve", (root / "one.yaml").string()},
                    root / "one.log");
  // Node 1 first: the daemons start in any order.
  auto node1 = start_daemon(root / "two.yaml", 1, root / "node1.log");
  auto node0 = start_daemon(root / "two.yaml", 0, root / "node0.log");
  const auto logs = [&] {
    return "node 0: " + read_text(root / "node0.log")
           + "\nnode 1: " + read_text(root / "node1.log")
           + "\none process: " + read_text(root / "one.log");
  };
  if (!wait_until(
        [&] { return serve_ready(one_port) && serve_ready(two_port); }, 30))
    FAIL("not ready within 30 s; " << logs());

  const auto alone = answers(one_port);
  const auto split = answers(two_port);
  for (size_t i = 0; i < alone.size(); ++i) {
    INFO("request " << i << ": " << alone[i].dump() << " vs "
                    << split[i].dump());
    REQUIRE(alone[i].contains("logprobs"));
    CHECK(alone[i]["logprobs"]["tokens"].size() == 12);
    // The same tokens and the same log-probabilities, bit for bit.
    CHECK(split[i] == alone[i]);
  }
  // The experts of rank 1 ran in node 1: rows crossed between the daemons.
  auto scraped = local_client(two_port).Get("/metrics");
  REQUIRE(scraped);
  CHECK(first_sample(scraped->body, "tutti_serve_all_to_all_bytes_total") > 0);
  // Node 1 announces the join once it has polled its own shards up, which
  // may be after node 0 has answered: wait for the line, boundedly.
  CHECK(wait_until(
    [&] {
      return read_text(root / "node1.log").find("joined node 0")
             != std::string::npos;
    },
    10));

  // Node 1 gone: node 0 is no longer ready and a request fails in bounded
  // time instead of hanging.
  node1.reset();
  auto r = local_client(two_port).Post("/v1/completions", requests()[0].dump(),
                                       "application/json");
  REQUIRE(r);
  CHECK(r->status != 200);
  CHECK(wait_until([&] { return !serve_ready(two_port); }, 15));
}
