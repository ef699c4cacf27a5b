// `tutti serve`'s config, parsed by tutti_config alone: defaults, every
// accepted form of its keys (byte sizes, HOST:PORT, lists, nested
// sections), the InferenceService manifest whose spec.serve holds the same
// keys, and refusals in one line naming the key path.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tutti/config/serve_config.hpp"

using namespace tutti;
using Catch::Matchers::StartsWith;

namespace {

serve::serve_config parsed(const std::string& text) {
  auto c = serve::parse_serve_config(text, "svc.yaml");
  INFO(c.message());
  REQUIRE(c.ok());
  return c.value();
}

std::string refused(const std::string& text) {
  auto c = serve::parse_serve_config(text, "svc.yaml");
  INFO(text);
  REQUIRE_FALSE(c.ok());
  CHECK(c.message().find('\n') == std::string::npos);
  return c.message();
}

const std::string manifest_head = "apiVersion: v1\n"
                                  "kind: InferenceService\n"
                                  "metadata:\n"
                                  "  name: moe-model-serving\n"
                                  "  labels: {team: a}\n"
                                  "spec:\n"
                                  "  parallelism:\n"
                                  "    type: expert_parallel\n"
                                  "    num_gpus_per_node: 8\n"
                                  "    num_nodes: 2\n"
                                  "  deployment:\n"
                                  "    rack_awareness: true\n"
                                  "    network:\n"
                                  "      intra_rack_backend: nvlink_like\n"
                                  "      inter_rack_backend: ethernet\n";

// Every serve key given, as a block indented by `indent`.
std::string every_key(const std::string& indent) {
  const std::vector<std::string> lines = {
    "model: runs/m/export",
    "model_name: m",
    "listen: 0.0.0.0:8123",
    "max_batch_tokens: 512",
    "max_sequences: 8",
    "max_queue: 9",
    "max_prompt_tokens: 100",
    "max_output_tokens: 200",
    "request_timeout_s: 2.5",
    "kv_cache_bytes: 1GiB",
    "kv_block_tokens: 32",
    "max_body_bytes: 512KiB",
    "http_threads: 4",
    "ep_size: 2",
    "step_timeout_s: 7",
    "prefix_caching: false",
    "api_keys: keys.txt",
    "metrics_web_config: web.yaml",
    "admin_policy: policy.yaml",
    "log_dir: logs",
    "placement: plan.json",
    "racks: [a, b]",
    "replan: {max_cross_rack_share: 0.25, window_steps: 10}",
    "rack_aware_alltoall: true",
  };
  std::string out;
  for (const auto& l : lines)
    out += indent + l + "\n";
  return out;
}

void check_every_key(const serve::serve_config& c) {
  CHECK(c.model == "runs/m/export");
  CHECK(c.model_name == "m");
  CHECK(c.host == "0.0.0.0");
  CHECK(c.port == 8123);
  CHECK(c.limits.batch.max_batch_tokens == 512);
  CHECK(c.limits.batch.max_sequences == 8);
  CHECK(c.limits.max_queue == 9);
  CHECK(c.limits.max_prompt_tokens == 100);
  CHECK(c.limits.max_output_tokens == 200);
  CHECK(c.limits.request_timeout_s == 2.5);
  CHECK(c.limits.kv_cache_bytes == 1ll << 30);
  CHECK(c.limits.kv_block_tokens == 32);
  CHECK(c.max_body_bytes == 512 << 10);
  CHECK(c.http_threads == 4);
  CHECK(c.ep_size == 2);
  CHECK(c.limits.step_timeout_s == 7);
  CHECK_FALSE(c.limits.batch.prefix_caching);
  CHECK(c.api_keys == "keys.txt");
  CHECK(c.metrics_web_config == "web.yaml");
  CHECK(c.admin_policy == "policy.yaml");
  CHECK(c.log_dir == "logs");
  CHECK(c.placement == "plan.json");
  CHECK(c.racks == std::vector<std::string>{"a", "b"});
  CHECK(c.replan);
  CHECK(c.max_cross_rack_share == 0.25);
  CHECK(c.replan_window_steps == 10);
  CHECK(c.limits.rack_aware_alltoall);
}

} // namespace

TEST_CASE("serve: the keys not given keep the declared defaults", "[unit]") {
  const auto c = parsed("serve:\n  model: m\n");
  const serve::serve_config d;
  CHECK(c.model == "m");
  CHECK(c.host == d.host);
  CHECK(c.port == 8000);
  CHECK(c.registry == "registry");
  CHECK(c.limits.batch.max_batch_tokens == d.limits.batch.max_batch_tokens);
  CHECK(c.limits.batch.max_sequences == d.limits.batch.max_sequences);
  CHECK(c.limits.batch.prefix_caching);
  CHECK(c.limits.max_queue == 64);
  CHECK(c.limits.kv_cache_bytes == 64ll << 20);
  CHECK(c.limits.request_timeout_s == d.limits.request_timeout_s);
  CHECK(c.max_body_bytes == 1 << 20);
  CHECK(c.ep_size == 0);
  CHECK(c.ep_ranks_for(8) == 1);
  CHECK_FALSE(c.offload.enabled());
  CHECK_FALSE(c.replan);
  CHECK_FALSE(c.from_manifest);
  CHECK_FALSE(c.limits.cluster.spans_daemons());
}

TEST_CASE("serve: every key in every accepted form", "[unit]") {
  check_every_key(parsed("serve:\n" + every_key("  ")));
  // Byte counts with or without a unit.
  CHECK(parsed("serve:\n  model: m\n  kv_cache_bytes: 67108864\n")
          .limits.kv_cache_bytes
        == 64ll << 20);
  CHECK(
    parsed("serve:\n  model: m\n  kv_cache_bytes: 3MiB\n").limits.kv_cache_bytes
    == 3ll << 20);
  // A published version instead of a directory; offload, across daemons.
  const auto v = parsed("serve:\n  model_version: tiny@v1\n  registry: r\n");
  CHECK(v.model_version == "tiny@v1");
  CHECK(v.registry == "r");
  const auto o = parsed("serve:\n  model: m\n  offload: {stats: s.json, "
                        "threshold: 0.02, rank: 1}\n");
  CHECK(o.offload.enabled());
  CHECK(o.offload.stats == "s.json");
  CHECK(o.offload.threshold == 0.02);
  CHECK(o.offload.rank == 1);
  const auto n = parsed("serve:\n  model: m\n  nodes: [10.0.0.1, 10.0.0.2]\n"
                        "  rendezvous_port: 29600\n"
                        "  data_parallel_attention: true\n");
  CHECK(n.limits.cluster.nodes
        == std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
  CHECK(n.limits.cluster.rendezvous_port == 29600);
  CHECK(n.limits.cluster.data_parallel_attention);
  CHECK(n.ep_ranks_for(8) == 1);
}

TEST_CASE("the manifest's spec.serve holds the same keys as serve:", "[unit]") {
  const auto m = parsed(manifest_head + "  serve:\n" + every_key("    "));
  check_every_key(m);
  CHECK(m.from_manifest);
  CHECK(m.num_gpus_per_node == 8);
  CHECK(m.num_nodes == 2);
  CHECK(m.devices() == 16);
  CHECK(m.rack_awareness);
  CHECK(m.intra_rack_backend == "nvlink_like");
  CHECK(m.inter_rack_backend == "ethernet");
  // metadata.name names the model unless spec.serve.model_name does.
  CHECK(parsed(manifest_head + "  serve:\n    model: m\n").model_name
        == "moe-model-serving");
  // ep_size unset: as many ranks as the devices, as far as they divide.
  CHECK(parsed(manifest_head + "  serve:\n    model: m\n").ep_ranks_for(8)
        == 8);
}

TEST_CASE("serve configs are refused in one line naming the key path",
          "[unit]") {
  const std::string serve = "serve:\n  model: m\n";
  const std::string spec = manifest_head + "  serve:\n    model: m\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
    // Unknown keys, at every level.
    {"serving:\n  model: m\n", "svc.yaml: serving: unknown key"},
    {serve + "  unknown_limit: 1\n", "svc.yaml: serve.unknown_limit: unknown"},
    {serve + "  offload: {stats: s, threshold: 0.1, rank: 1, node: 2}\n",
     "svc.yaml: serve.offload.node: unknown key"},
    {serve + "  racks: [a]\n  replan: {window: 3}\n",
     "svc.yaml: serve.replan.window: unknown key"},
    {spec + "    max_queues: 3\n", "svc.yaml: spec.serve.max_queues: unknown"},
    {spec + "  replicas: 3\n", "svc.yaml: spec.replicas: unknown key"},
    {manifest_head + "  deployment2: {}\n", "svc.yaml: spec.deployment2"},
    {manifest_head + "status: {}\n", "svc.yaml: status: unknown key"},
    // Bad values, by kind.
    {serve + "  max_queue: -3\n", "svc.yaml: serve.max_queue: must be >= 1"},
    {serve + "  max_queue: many\n", "svc.yaml: serve.max_queue: expected an "
                                    "integer, got 'many'"},
    {serve + "  max_queue: 1.5\n", "svc.yaml: serve.max_queue: expected"},
    {serve + "  request_timeout_s: 0\n",
     "svc.yaml: serve.request_timeout_s: must be > 0"},
    {serve + "  prefix_caching: maybe\n",
     "svc.yaml: serve.prefix_caching: expected true or false"},
    {serve + "  kv_cache_bytes: 64MB\n",
     "svc.yaml: serve.kv_cache_bytes: must be a byte count"},
    {serve + "  kv_cache_bytes: 0\n",
     "svc.yaml: serve.kv_cache_bytes: must be > 0"},
    {serve + "  listen: nowhere\n",
     "svc.yaml: serve.listen: must be HOST:PORT, got 'nowhere'"},
    {serve + "  listen: h:99999\n", "svc.yaml: serve.listen: port must be"},
    {serve + "  racks: a\n", "svc.yaml: serve.racks: expected a list"},
    {serve + "  racks: []\n", "svc.yaml: serve.racks: must be a list of rack"},
    {serve + "  racks: [a, '']\n", "svc.yaml: serve.racks[1]: must not be "
                                   "empty"},
    {serve + "  offload: {stats: s, rank: 1}\n",
     "svc.yaml: serve.offload.threshold: missing"},
    {serve + "  offload: {stats: s, threshold: 2, rank: 1}\n",
     "svc.yaml: serve.offload.threshold: must be a share in (0, 1]"},
    {serve + "  nodes: [a, b]\n  rendezvous_port: 70000\n",
     "svc.yaml: serve.rendezvous_port: must be in"},
    {serve + "  offload: 3\n", "svc.yaml: serve.offload: expected a mapping"},
    {manifest_head + "  parallelism2: 1\n", "svc.yaml: spec.parallelism2"},
    {"kind: Deployment\napiVersion: v1\nspec: {}\n",
     "svc.yaml: kind: must be InferenceService, got 'Deployment'"},
    {"kind: InferenceService\nspec: {}\n", "svc.yaml: apiVersion: missing"},
    {"kind: InferenceService\napiVersion: v1\n", "svc.yaml: spec: missing"},
    {"kind: InferenceService\napiVersion: v1\nspec:\n  parallelism:\n"
     "    type: tensor_parallel\n",
     "svc.yaml: spec.parallelism.type: must be expert_parallel"},
    {"kind: InferenceService\napiVersion: v1\nspec:\n  parallelism:\n"
     "    num_nodes: two\n",
     "svc.yaml: spec.parallelism.num_nodes: expected an integer"},
    // Across keys.
    {serve + "  max_batch_tokens: 8\n  max_sequences: 16\n",
     "svc.yaml: serve.max_batch_tokens: must be at least max_sequences (16)"},
    {serve + "  model_version: a@b\n",
     "svc.yaml: serve.model_version: give either model or model_version"},
    {"serve:\n  model_version: a\n", "svc.yaml: serve.model_version: must be "
                                     "NAME@VERSION"},
    {"serve:\n  max_queue: 3\n", "svc.yaml: serve.model: missing"},
    {manifest_head, "svc.yaml: spec.serve.model: missing"},
    {serve + "  nodes: [a:1, b]\n  rendezvous_port: 29600\n",
     "svc.yaml: serve.nodes: each entry must be a host address without a "
     "port"},
    {serve + "  nodes: [a, b]\n", "svc.yaml: serve.rendezvous_port: missing"},
    {spec + "    nodes: [a, b]\n", "svc.yaml: spec.serve.rendezvous_port: "
                                   "missing"},
    {spec + "    nodes: [a]\n    rendezvous_port: 29600\n",
     "svc.yaml: spec.serve.nodes: lists 1 daemons, but "
     "spec.parallelism.num_nodes is 2"},
    {serve + "  rack_aware_alltoall: true\n",
     "svc.yaml: serve.rack_aware_alltoall: needs serve.racks"},
    {serve + "  replan: {max_cross_rack_share: 0.3}\n",
     "svc.yaml: serve.replan: needs serve.racks"},
    {serve + "  data_parallel_attention: true\n",
     "svc.yaml: serve.data_parallel_attention: needs serve.nodes"},
  };
  for (const auto& [text, start] : cases) {
    INFO(text);
    CHECK_THAT(refused(text), StartsWith(start));
  }
  CHECK_THAT(refused("serve: [1, 2]\n"), StartsWith("svc.yaml: serve: "));
  CHECK_THAT(refused("- a\n- b\n"), StartsWith("svc.yaml: "));
  CHECK_THAT(refused("serve: {model: m\n"), StartsWith("svc.yaml: not YAML"));
}
