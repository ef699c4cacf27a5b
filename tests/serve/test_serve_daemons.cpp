// The same service across two `tuttid` daemons from one config (serve.nodes:
// one rank each, the experts split between them, dispatch and combine over
// Gloo between the processes) answers every request with the tokens and
// log-probabilities of `tutti serve` in one process: greedy and seeded
// sampling, sent concurrently by a real HTTP client; a Mixtral and a
// Qwen3-MoE model. So do two daemons of two ranks each (serve.ep_size 2),
// node 0's sequences on its first rank or, with data_parallel_attention,
// on every rank; each daemon holds its two ranks' experts. When node 1
// dies, node 0 reports not ready and a request gets an error, not a hang.

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

// `model` served by `tutti serve` in one process and by two daemons
// (serve.nodes; `extra` adds keys), node 1 started first: the daemons
// start in any order. Ready on return, or the test fails with the logs.
struct one_and_two {
  fs::path root;
  int one_port = 0, two_port = 0;
  std::unique_ptr<child_process> one, node1, node0;

  one_and_two(const fs::path& dir, const fs::path& model, int salt,
              const std::string& extra)
    : root(dir) {
    const int base = port_block(salt, 3);
    one_port = base;
    two_port = base + 1;
    write_text(root / "one.yaml", serve_yaml(model, one_port, ""));
    write_text(root / "two.yaml",
               serve_yaml(model, two_port,
                          "  nodes: [127.0.0.1, 127.0.0.1]\n"
                          "  rendezvous_port: "
                            + std::to_string(base + 2) + "\n" + extra));
    one = std::make_unique<child_process>(
      std::vector<std::string>{tutti_bin(), "serve",
                               (root / "one.yaml").string()},
      root / "one.log");
    node1 = start_daemon(root / "two.yaml", 1, root / "node1.log");
    node0 = start_daemon(root / "two.yaml", 0, root / "node0.log");
    if (!wait_until(
          [&] { return serve_ready(one_port) && serve_ready(two_port); }, 30))
      FAIL("not ready within 30 s; " << logs());
  }

  std::string logs() const {
    return "node 0: " + read_text(root / "node0.log")
           + "\nnode 1: " + read_text(root / "node1.log")
           + "\none process: " + read_text(root / "one.log");
  }

  // The same tokens and log-probabilities, bit for bit; rows crossed
  // between the daemons; node 1 said which ranks joined (once it has
  // polled its own shards up, which may be after node 0 has answered:
  // waited for, boundedly).
  void check_same_answers(const std::string& joined) const {
    const auto alone = answers(one_port);
    const auto split = answers(two_port);
    for (size_t i = 0; i < alone.size(); ++i) {
      INFO("request " << i << ": " << alone[i].dump() << " vs "
                      << split[i].dump());
      REQUIRE(alone[i].contains("logprobs"));
      CHECK(alone[i]["logprobs"]["tokens"].size() == 12);
      CHECK(split[i] == alone[i]);
    }
    auto scraped = local_client(two_port).Get("/metrics");
    REQUIRE(scraped);
    CHECK(first_sample(scraped->body, "tutti_serve_all_to_all_bytes_total")
          > 0);
    CHECK(wait_until(
      [&] {
        return read_text(root / "node1.log").find(joined) != std::string::npos;
      },
      10));
  }
};

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
  one_and_two svc(root, model, qwen3 ? 54 : 53, "");
  svc.check_same_answers("experts of rank 1 joined node 0");

  // Node 1 gone: node 0 is no longer ready and a request fails in bounded
  // time instead of hanging.
  svc.node1.reset();
  auto r = local_client(svc.two_port)
             .Post("/v1/completions", requests()[0].dump(),
                   "application/json");
  REQUIRE(r);
  CHECK(r->status != 200);
  CHECK(wait_until([&] { return !serve_ready(svc.two_port); }, 15));
}

TEST_CASE("2 tuttid daemons x 2 ranks serve as 1 process", "[integration]") {
  const bool dp = GENERATE(false, true);
  INFO((dp ? "data_parallel_attention" : "node 0's first rank holds "
                                         "the sequences"));
  auto root = scratch(dp ? "serve_daemons_2x2_dp" : "serve_daemons_2x2");
  // 4 experts of 2 layers: one a layer on each of the 4 ranks.
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 64, 128, 2, 4, 2, 4, 2, 128), 59);
  one_and_two svc(root, model, dp ? 231 : 229,
                  std::string("  ep_size: 2\n")
                    + (dp ? "  data_parallel_attention: true\n" : ""));
  INFO(svc.logs());
  svc.check_same_answers("experts of ranks 2-3 joined node 0");
  // Each daemon loaded its two ranks' experts, one a layer each: 4.
  for (const char* log : {"node0.log", "node1.log"})
    CHECK(read_text(root / log).find("+ 4 own experts") != std::string::npos);
  svc.node1.reset();
  CHECK(wait_until([&] { return !serve_ready(svc.two_port); }, 15));
}
