// `tutti serve CONFIG`: seed 001's InferenceService manifest, verbatim with
// a spec.serve section, serves curl requests and stops on SIGTERM; bad
// manifests, limits and model directories are refused in one line naming
// the key or file, exit 2, before anything listens.

#include <catch2/catch.hpp>

#include <csignal>
#include <regex>

#include "daemon_support.hpp"
#include "serve_test_support.hpp"
#include "tutti/config/serve_config.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// The manifest from seed 001, as its users write it.
const char* seed_manifest =
  "apiVersion: v1\n"
  "kind: InferenceService\n"
  "metadata:\n"
  "  name: moe-model-serving\n"
  "spec:\n"
  "  parallelism:\n"
  "    type: expert_parallel\n"
  "    num_gpus_per_node: 8\n"
  "    num_nodes: 2\n"
  "  deployment:\n"
  "    rack_awareness: true  # prefer in-rack traffic\n"
  "    network:\n"
  "      intra_rack_backend: \"nvlink_like\"\n"
  "      inter_rack_backend: \"high_speed_ethernet\"\n";

fs::path small_export(const fs::path& root) {
  return write_random_export(
    root / "model", serve_test_config(256, 32, 64, 2, 4, 2, 4, 2, 64), 41);
}

} // namespace

TEST_CASE("tutti serve refuses bad configs and models before listening",
          "[integration]") {
  auto root = scratch("serve_cli_bad");
  const auto model = small_export(root).string();
  auto help = run(tutti_bin() + " serve --help");
  CHECK(help.status == 0);
  CHECK(run(tutti_bin() + " bench serve --help").status == 0);
  CHECK(run(tutti_bin() + " bench serve --slo fast").status == 2);
  CHECK(help.output.find("max_batch_tokens") != std::string::npos);

  auto bad_model = root / "bad_model";
  fs::copy(model, bad_model, fs::copy_options::recursive);
  auto j = nlohmann::json::parse(read_text(bad_model / "config.json"));
  j.erase("num_experts_per_tok");
  write_text(bad_model / "config.json", j.dump());

  const std::string serve_model = "  serve:\n    model: " + model + "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
    {std::string(seed_manifest), "spec.serve.model"},
    {std::regex_replace(std::string(seed_manifest),
                        std::regex("InferenceService"), "Deployment")
       + serve_model,
     "kind"},
    {std::regex_replace(std::string(seed_manifest),
                        std::regex("expert_parallel"), "tensor_parallel")
       + serve_model,
     "spec.parallelism.type"},
    {std::regex_replace(std::string(seed_manifest), std::regex("num_nodes: 2"),
                        "num_nodes: two")
       + serve_model,
     "spec.parallelism.num_nodes"},
    {std::regex_replace(std::string(seed_manifest),
                        std::regex("rack_awareness: true"),
                        "rack_awareness: true\n    racks: 3")
       + serve_model,
     "spec.deployment.racks"},
    {std::string(seed_manifest) + serve_model + "    max_queue: -3\n",
     "spec.serve.max_queue"},
    {std::string(seed_manifest) + serve_model + "    listen: nowhere\n",
     "spec.serve.listen"},
    {std::string(seed_manifest) + "  serve:\n    model: " + root.string()
       + "/absent\n",
     "absent"},
    {std::string(seed_manifest) + "  serve:\n    model: " + bad_model.string()
       + "\n",
     "num_experts_per_tok"},
    {"serve:\n  model: " + model + "\n  kv_cache_bytes: 100\n",
     "kv_cache_bytes"},
    {"serve:\n  model: " + model
       + "\n  max_batch_tokens: 8\n  max_sequences: 16\n",
     "max_batch_tokens"},
    {"serve:\n  model: " + model + "\n  unknown_limit: 1\n",
     "serve.unknown_limit"},
    {"serving:\n  model: " + model + "\n", "serving"},
    // Across daemons: node 0's rendezvous port, addresses without ports,
    // as many as the manifest's nodes, one rank each.
    {std::string(seed_manifest) + serve_model
       + "    nodes: [127.0.0.1, 127.0.0.1]\n",
     "spec.serve.rendezvous_port"},
    {std::string(seed_manifest) + serve_model
       + "    nodes: [127.0.0.1]\n    rendezvous_port: 29600\n",
     "spec.serve.nodes"},
    {"serve:\n  model: " + model
       + "\n  nodes: [a:1, b]\n  rendezvous_port: 29600\n",
     "serve.nodes"},
    {"serve:\n  model: " + model
       + "\n  nodes: [a, b]\n  rendezvous_port: 29600\n  ep_size: 3\n",
     "serve.ep_size"},
  };
  int n = 0;
  for (const auto& [text, named] : cases) {
    auto file = root / ("bad" + std::to_string(n++) + ".yaml");
    write_text(file, text);
    auto r = run(tutti_bin() + " serve " + file.string()
                 + " --listen 127.0.0.1:0");
    INFO(text);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(named) != std::string::npos);
    CHECK(r.output.find("on http://") == std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  auto missing = run(tutti_bin() + " serve " + (root / "none.yaml").string());
  CHECK(missing.status == 2);
  CHECK(missing.output.find("none.yaml") != std::string::npos);
}

TEST_CASE("tutti export --init writes the README's medium model",
          "[integration]") {
  auto out = scratch("serve_cli_init") / "medium";
  auto r = run(tutti_bin() + " export --init " + source_dir()
               + "/configs/medium.yaml --format hf --out " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto m = serve::load_model(out);
  INFO(m.message());
  REQUIRE(m.ok());
  const auto& s = m.value().shape;
  CHECK(s.vocab == 256);
  CHECK(s.hidden == 256);
  CHECK(s.intermediate == 512);
  CHECK(s.layers == 4);
  CHECK(s.experts == 8);
  CHECK(s.top_k == 2);
  CHECK(s.q_heads == 8);
  CHECK(s.kv_heads == 4);
  // The manifest the README serves it with is a valid serve config.
  auto cfg = serve::load_serve_config(source_dir()
                                      + "/configs/serve-medium.yaml");
  INFO(cfg.message());
  REQUIRE(cfg.ok());
  CHECK(cfg.value().model_name == "medium");
  CHECK(cfg.value().limits.kv_cache_bytes == 256ll << 20);
  auto dir = run(tutti_bin() + " serve " + out.string());
  CHECK(dir.status == 2);
  CHECK(dir.output.find("a directory, not a config file") != std::string::npos);
}

TEST_CASE("tutti serve serves seed 001's manifest to curl", "[integration]") {
  auto root = scratch("serve_cli_run");
  const auto model = small_export(root).string();
  auto file = root / "service.yaml";
  write_text(file, std::string(seed_manifest) + "  serve:\n    model: " + model
                     + "\n    listen: 127.0.0.1:0\n    max_sequences: 4\n");
  auto log = root / "serve.log";
  serve_process server(file, log, 30);
  INFO(server.log_text);
  REQUIRE(server.port != 0);
  const auto& text = server.log_text;
  CHECK(text.find("moe-model-serving") != std::string::npos);
  CHECK(text.find("16 devices") != std::string::npos);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port);
  auto models = run("curl -sS " + url + "/v1/models");
  CHECK(models.output.find("\"id\":\"moe-model-serving\"")
        != std::string::npos);
  auto done = run("curl -sS " + url
                  + "/v1/completions -H 'Content-Type: application/json' -d "
                    "'{\"model\": \"moe-model-serving\", \"prompt\": \"Once\", "
                    "\"max_tokens\": 5, \"temperature\": 0}'");
  INFO(done.output);
  auto j = nlohmann::json::parse(done.output, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["choices"][0]["token_ids"].size() == 5);
  auto streamed = run("curl -sSN " + url
                      + "/v1/completions -H 'Content-Type: application/json' "
                        "-d '{\"prompt\": \"Once\", \"max_tokens\": 5, "
                        "\"stream\": true}'");
  CHECK(streamed.output.find("data: [DONE]") != std::string::npos);
  // tutti bench serve against it: a table, JSON, exit 0.
  auto bench_json = root / "bench.json";
  auto bench = run(tutti_bin() + " bench serve --url " + url
                   + " --requests 6 --concurrency 1,3 --prompt-tokens 4"
                     " --output-tokens 4 --slo ttft=60s,tpot=10s --json "
                   + bench_json.string() + " --no-progress");
  INFO(bench.output);
  CHECK(bench.status == 0);
  CHECK(bench.output.find("TPOT") != std::string::npos);
  auto results = nlohmann::json::parse(read_text(bench_json), nullptr, false);
  REQUIRE(results.is_array());
  REQUIRE(results.size() == 2);
  CHECK(results[1]["concurrency"] == 3);
  CHECK(results[1]["completed"] == 6);
  CHECK(results[1]["output_tokens"] == 24);
  server.process.signal(SIGTERM);
  CHECK(server.process.wait(20) == 0);
}
