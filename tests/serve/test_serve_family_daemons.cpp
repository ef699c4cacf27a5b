// Each model family served across two `tuttid` daemons (serve.nodes: one
// rank each, the experts split between them, dispatch and combine over Gloo
// between the processes) streams every request's tokens and
// log-probabilities with the same bits as `tutti serve` in one process (EP
// 1 and 2), one request at a time and eight at once: a Qwen3-MoE model
// (QK-norm, grouped query heads of 24) and a DeepSeek-V3 model (multi-head
// latent attention, a leading dense layer, a shared expert, the
// group-limited sigmoid router);
// the DeepSeek-V3 model also as an FP8 block-scaled checkpoint, each daemon
// dequantizing its own part, against its float32 values in one process.

#include <catch2/catch.hpp>

#include <httplib.h>

#include <sstream>
#include <thread>

#include "daemon_support.hpp"
#include "fp8_export.hpp"
#include "serve_http_support.hpp"
#include "serve_test_support.hpp"

using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::json;

namespace {

// Eight streamed requests: prompts of several lengths, greedy and seeded
// sampling, the chosen token's log-probability and the top 2.
std::vector<json> requests() {
  std::vector<json> out;
  for (int i = 0; i < 8; ++i) {
    json body = {{"prompt", std::string("tutti serves ") + char('a' + i)
                              + std::string(i * 3, 'x')},
                 {"max_tokens", 10},
                 {"logprobs", 2},
                 {"stream", true}};
    if (i % 2) {
      body["temperature"] = 0.9;
      body["seed"] = 200 + i;
    } else {
      body["temperature"] = 0;
    }
    out.push_back(body);
  }
  return out;
}

// A streamed answer's chunks joined: text, token ids, log-probabilities
// and alternatives in order, and the finish reason; or what went wrong.
json joined(const httplib::Result& r) {
  if (!r || r->status != 200)
    return {{"failed", r ? r->body : httplib::to_string(r.error())}};
  json out = {{"text", ""},
              {"token_ids", json::array()},
              {"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"finish_reason", nullptr}};
  bool done = false;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0)
      continue;
    const auto data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const auto choice = json::parse(data)["choices"][0];
    out["text"] = out["text"].get<std::string>()
                  + choice["text"].get<std::string>();
    for (const auto& id : choice["token_ids"])
      out["token_ids"].push_back(id);
    for (const char* part : {"tokens", "token_logprobs", "top_logprobs"})
      for (const auto& v : choice["logprobs"][part])
        out[part].push_back(v);
    if (!choice["finish_reason"].is_null())
      out["finish_reason"] = choice["finish_reason"];
  }
  out["done"] = done;
  return out;
}

// Every request's joined answer, sent one after another or all at once.
std::vector<json> answers(int port, bool all_at_once) {
  const auto bodies = requests();
  std::vector<json> out(bodies.size());
  auto ask = [&](size_t i) {
    out[i] = joined(local_client(port).Post("/v1/completions", bodies[i].dump(),
                                            "application/json"));
  };
  if (!all_at_once) {
    for (size_t i = 0; i < bodies.size(); ++i)
      ask(i);
    return out;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back(ask, i);
  for (auto& t : threads)
    t.join();
  return out;
}

} // namespace

TEST_CASE("each family streams the same bits across 2 tuttid daemons as in "
          "1 process at EP 1 and 2, at concurrency 1 and 8",
          "[integration]") {
  const std::string family = GENERATE(as<std::string>(), "Qwen3-MoE",
                                      "DeepSeek-V3", "DeepSeek-V3 FP8");
  INFO(family);
  const bool deepseek = family != "Qwen3-MoE";
  const bool fp8 = family == "DeepSeek-V3 FP8";
  auto root = scratch(fp8        ? "serve_family_daemons_deepseek_fp8"
                      : deepseek ? "serve_family_daemons_deepseek"
                                 : "serve_family_daemons_qwen3");
  const auto cfg = deepseek ? deepseek_test_config(256, 128)
                            : qwen3_test_config(256, 64, 128, 2, 4, 2, 24, 4, 2,
                                                128, false);
  // FP8: the daemons serve the checkpoint, the one process its float32
  // values.
  auto model = root / "model", split = model;
  if (fp8) {
    const auto q = quantized(cfg, random_model_tensors(cfg, 59), 16, 16);
    write_quantized_dir(model, cfg, nullptr, q.dequant);
    split = write_quantized_dir(root / "fp8", cfg, fp8_config({16, 16}), q.fp8);
  } else {
    write_random_export(model, cfg, 59);
  }
  const int base = port_block(fp8 ? 56 : deepseek ? 57 : 58, 4);
  const int one_port = base, two_port = base + 1, rendezvous = base + 2,
            ep2_port = base + 3;

  write_text(root / "one.yaml", serve_yaml(model, one_port, ""));
  write_text(root / "ep2.yaml", serve_yaml(model, ep2_port, "  ep_size: 2\n"));
  write_text(root / "two.yaml",
             serve_yaml(split, two_port,
                        "  nodes: [127.0.0.1, 127.0.0.1]\n"
                        "  rendezvous_port: "
                          + std::to_string(rendezvous) + "\n"));
  child_process one({tutti_bin(), "serve", (root / "one.yaml").string()},
                    root / "one.log");
  child_process ep2({tutti_bin(), "serve", (root / "ep2.yaml").string()},
                    root / "ep2.log");
  auto node1 = start_daemon(root / "two.yaml", 1, root / "node1.log");
  auto node0 = start_daemon(root / "two.yaml", 0, root / "node0.log");
  const auto logs = [&] {
    return "node 0: " + tail(read_text(root / "node0.log"))
           + "\nnode 1: " + tail(read_text(root / "node1.log"))
           + "\none process: " + tail(read_text(root / "one.log"))
           + "\none process, EP 2: " + tail(read_text(root / "ep2.log"));
  };
  if (!wait_until(
        [&] {
          return serve_ready(one_port) && serve_ready(two_port)
                 && serve_ready(ep2_port);
        },
        30))
    FAIL("not ready within 30 s; " << logs());

  const auto alone = answers(one_port, false);
  for (const auto& a : alone) {
    INFO(a.dump());
    REQUIRE(a.contains("token_ids"));
    CHECK(a["token_ids"].size() == 10);
    CHECK(a["token_logprobs"].size() == 10);
    CHECK(a["done"] == true);
  }
  const std::pair<const char*, std::vector<json>> others[] = {
    {"1 process, 8 at once", answers(one_port, true)},
    {"1 process EP 2, one at a time", answers(ep2_port, false)},
    {"1 process EP 2, 8 at once", answers(ep2_port, true)},
    {"2 daemons, one at a time", answers(two_port, false)},
    {"2 daemons, 8 at once", answers(two_port, true)}};
  for (const auto& [how, got] : others)
    for (size_t i = 0; i < alone.size(); ++i) {
      INFO(how << ", request " << i << ": " << got[i].dump() << " vs "
               << alone[i].dump());
      // The same tokens and log-probabilities, bit for bit (JSON numbers
      // written with round-trip precision).
      CHECK(got[i] == alone[i]);
    }
  // The experts of rank 1 ran in node 1: rows crossed between the daemons.
  auto scraped = local_client(two_port).Get("/metrics");
  REQUIRE(scraped);
  CHECK(first_sample(scraped->body, "tutti_serve_all_to_all_bytes_total") > 0);
  INFO(logs());
  // Node 1 announces the join once it has polled its own shards up, which
  // may be after node 0 has answered: wait for the line, boundedly.
  CHECK(wait_until(
    [&] {
      return read_text(root / "node1.log").find("joined node 0")
             != std::string::npos;
    },
    10));
}
