// A model whose experts do not fit one daemon's serve.memory_limit is
// served by 4 tuttid daemons of 2 ranks each (serve.ep_size), each daemon
// holding the dense weights and only its ranks' own experts: `tutti serve --plan` predicts each daemon's bytes, one
// process under the same limit refuses to start naming the figures, each
// daemon's peak RSS (VmHWM) above the process's own is within 10% of its
// prediction, and the tokens and log-probabilities are those of one
// process holding every expert; in the clear and under mutual TLS between
// the daemons. A daemon's own resident bytes (its code
// and libraries, about 27 MiB, its threads and buffers) are measured on a
// twin service of the same model with experts 256 times smaller: 96 MiB
// of experts a daemon dominate them.

#include <catch2/catch.hpp>

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon_support.hpp"
#include "security_support.hpp"
#include "serve_http_support.hpp"
#include "serve_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int daemons = 4;

// Greedy and seeded requests, all at once; each answer's first choice.
std::vector<json> answers(int port) {
  std::vector<json> out(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      json body = {{"prompt", std::string("sharded ") + char('a' + i)
                                + std::string(i * 4, 'z')},
                   {"max_tokens", 8},
                   {"logprobs", 1},
                   {"temperature", i % 2 ? 0.9 : 0.0},
                   {"seed", 300 + i}};
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

struct planned {
  int64_t node, dense, experts, expert_bytes, kv, total;
};

// The rows of `tutti serve CONFIG --plan`'s table.
std::vector<planned> plan_rows(const std::string& text) {
  std::vector<planned> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0])))
      continue;
    std::istringstream row(line);
    planned p{};
    std::string address;
    row >> p.node >> address >> p.dense >> p.experts >> p.expert_bytes >> p.kv
      >> p.total;
    REQUIRE(row);
    out.push_back(p);
  }
  return out;
}

// The peak resident bytes of process `pid` (VmHWM); -1 if unreadable.
int64_t peak_rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024; // kB
  return -1;
}

// `tutti ARGS...`'s exit status and output, within `seconds`.
std::pair<int, std::string> run_tutti(const std::vector<std::string>& args,
                                      const fs::path& log, double seconds) {
  std::vector<std::string> argv{tutti_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  child_process p(argv, log);
  const int status = p.wait(seconds);
  return {status, read_text(log)};
}

struct service_run {
  std::vector<json> answers;
  std::vector<int64_t> peaks; // VmHWM of each daemon, after the requests
};

// The 4 daemons of `config` (node 3 first: any order), the requests, each
// daemon's peak; every daemon is killed on return.
service_run serve_on_four(const fs::path& config, int port,
                          const std::string& tag, const fs::path& root) {
  std::vector<std::unique_ptr<child_process>> node(daemons);
  for (int n = daemons - 1; n >= 0; --n)
    node[n] = start_daemon(config, n,
                           root / (tag + "-node" + std::to_string(n) + ".log"));
  const auto logs = [&] {
    std::string out;
    for (int n = 0; n < daemons; ++n)
      out += "\nnode " + std::to_string(n) + ": "
             + read_text(root / (tag + "-node" + std::to_string(n) + ".log"));
    return out;
  };
  service_run out;
  if (!wait_until([&] { return serve_ready(port); }, 60))
    FAIL(tag << ": not ready within 60 s" << logs());
  out.answers = answers(port);
  for (int n = 0; n < daemons; ++n)
    out.peaks.push_back(peak_rss(node[n]->pid()));
  return out;
}

std::string cluster(int rendezvous) {
  std::string out = "  nodes: [";
  for (int i = 0; i < daemons; ++i)
    out += std::string(i ? ", " : "") + "127.0.0.1";
  return out + "]\n  rendezvous_port: " + std::to_string(rendezvous)
         + "\n  ep_size: 2\n";
}

} // namespace

TEST_CASE("4 daemons of 2 ranks, each holding its own experts, serve a "
          "model larger than one daemon's memory limit",
          "[integration]") {
  const bool tls = GENERATE(false, true);
  INFO((tls ? "mutual TLS" : "in the clear"));
  auto root = scratch(tls ? "serve_sharded_tls" : "serve_sharded");
  // Under TLS every daemon holds its node certificate of the cluster CA.
  std::string security;
  if (tls) {
    const auto pki = make_pki(root);
    security::identity node;
    node.kind = security::identity_kind::node;
    for (int64_t n : {2, 3}) {
      node.node_rank = n;
      REQUIRE(security::issue_certificate(pki.dir.string(), node, 86400).ok());
    }
    const auto d = pki.dir.string();
    security = "security:\n  required: true\n  tls:\n    ca: " + d
               + "/ca.crt\n    cert: " + d + "/node-{node}.crt\n    key: "
               + d + "/node-{node}.key\n";
  }
  // 2 layers x 64 experts of 3 x 256 x 1024 floats: 384 MiB of experts,
  // 96 MiB a daemon; the dense weights are 4 MB. The twin's experts are
  // 3 x 256 x 4.
  const auto model = write_random_export(
    root / "model", serve_test_config(256, 256, 1024, 2, 4, 2, 64, 2, 128), 61);
  const auto twin = write_random_export(
    root / "twin", serve_test_config(256, 256, 4, 2, 4, 2, 64, 2, 128), 61);
  const int base = port_block(617, 5);
  const int one_port = base, four_port = base + 1, twin_port = base + 3;
  const auto four = root / "four.yaml", twin_four = root / "twin.yaml";
  write_text(four, serve_yaml(model, four_port, cluster(base + 2)) + security);
  write_text(twin_four,
             serve_yaml(twin, twin_port, cluster(base + 4)) + security);

  // The prediction, then a limit between a daemon's share and the whole.
  auto plan = [&](const fs::path& config, const std::string& tag) {
    auto [status, text] = run_tutti({"serve", config.string(), "--plan"},
                                    root / (tag + ".log"), 60);
    INFO(text);
    CHECK(status == 0);
    const auto rows = plan_rows(text);
    REQUIRE(rows.size() == daemons);
    return rows;
  };
  const auto rows = plan(four, "plan");
  int64_t largest = 0, all_experts = 0;
  for (const auto& r : rows) {
    CHECK(r.experts == 2 * 64 / daemons);
    CHECK(r.total == r.dense + r.expert_bytes + r.kv);
    largest = std::max(largest, r.total);
    all_experts += r.expert_bytes;
  }
  const int64_t limit = largest + largest / 10;
  REQUIRE(all_experts > limit);
  const auto limit_key = "  memory_limit: " + std::to_string(limit) + "\n";
  write_text(four, serve_yaml(model, four_port, cluster(base + 2) + limit_key)
                     + security);
  CHECK(plan(four, "plan-limited").size() == daemons);

  // One process under the same limit refuses, naming the figures.
  write_text(root / "one_limited.yaml", serve_yaml(model, one_port, limit_key));
  auto [refused, refusal] = run_tutti(
    {"serve", (root / "one_limited.yaml").string()}, root / "refused.log", 60);
  CHECK(refused == 2);
  CHECK_THAT(refusal, Catch::Contains("serve.memory_limit: daemon 0 would "
                                      "hold")
                        && Catch::Contains("above the limit of "
                                           + std::to_string(limit)));

  // Each daemon's own bytes: its twin's peak beyond the twin's prediction.
  const auto twin_rows = plan(twin_four, "twin-plan");
  const auto twin_run = serve_on_four(twin_four, twin_port, "twin", root);

  // One process holding every expert, and the 4 daemons.
  write_text(root / "one.yaml", serve_yaml(model, one_port, ""));
  child_process one({tutti_bin(), "serve", (root / "one.yaml").string()},
                    root / "one.log");
  if (!wait_until([&] { return serve_ready(one_port); }, 60))
    FAIL("one process: not ready within 60 s: " << read_text(root / "one.log"));
  const auto alone = answers(one_port);
  const auto split = serve_on_four(four, four_port, "four", root);
  for (size_t i = 0; i < alone.size(); ++i) {
    INFO("request " << i << ": " << split.answers[i].dump() << " vs "
                    << alone[i].dump());
    REQUIRE(alone[i].contains("logprobs"));
    CHECK(split.answers[i] == alone[i]);
  }
  for (int n = 0; n < daemons; ++n) {
    const int64_t own = twin_run.peaks[n] - twin_rows[n].total;
    const int64_t held = split.peaks[n] - own;
    INFO("node " << n << ": peak " << split.peaks[n] << " bytes, its own "
                 << own << " (the twin's peak " << twin_run.peaks[n]
                 << " less its prediction " << twin_rows[n].total << "), so "
                 << held << " held against " << rows[n].total << " predicted");
    CHECK(twin_run.peaks[n] > 0);
    CHECK(split.peaks[n] > limit / 2);
    CHECK(std::abs(static_cast<double>(held - rows[n].total))
          <= 0.1 * static_cast<double>(rows[n].total));
  }
  // The one process holds every expert: above the limit.
  CHECK(peak_rss(one.pid()) > limit);
}
