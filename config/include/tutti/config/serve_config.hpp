#pragma once
// The config of `tutti serve`: a `serve:` section of tutti's own keys, or
// an InferenceService manifest (apiVersion, kind: InferenceService,
// metadata.name, spec.parallelism, spec.deployment: what the users'
// deployment tools write) whose spec.serve holds the same keys. Each key
// is declared once below, as the job's are (field.hpp): the YAML reader,
// its one-line refusals naming the key path (serve.max_queue,
// spec.serve.max_queue), the defaults and the key reference
// (docs/config-reference.md) derive from the declarations; checks across
// keys are in src/serve_checks.cpp.
//
// Adding a key: a member with its default, and one v.field(...) line.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/enums.hpp"
#include "tutti/config/field.hpp"
#include "tutti/config/security_config.hpp"
#include "tutti/config/serve_limits.hpp"

namespace tutti::serve {

// The manifest's kind and spec.parallelism.type: one value each that
// tutti serves.
enum class manifest_kind { InferenceService };
enum class parallelism_kind { expert_parallel };

} // namespace tutti::serve

namespace tutti {
template <>
struct enum_names<serve::manifest_kind> {
  static constexpr std::array names{"InferenceService"};
};
template <>
struct enum_names<serve::parallelism_kind> {
  static constexpr std::array names{"expert_parallel"};
};
} // namespace tutti

namespace tutti::serve {

// serve.offload (offload_layout.hpp): experts whose share of their layer's
// routed tokens in `stats` is below `threshold` are served by `rank`.
// Unset: rank -1.
struct offload_config {
  std::string stats;
  double threshold = 0.0;
  int64_t rank = -1;
  bool enabled() const { return rank >= 0; }
};

template <class Visitor>
void visit_fields(Visitor& v, offload_config& c) {
  using namespace config;
  v.field("stats", c.stats,
          "routing statistics: `tutti experts stats ... --json`'s file",
          required, not_empty{"missing"});
  v.field("threshold", c.threshold,
          "experts used below this share of their layer's routed tokens "
          "are offloaded",
          required,
          with_message(in_range(0, 1, "(]"), "must be a share in (0, 1]"));
  v.field("rank", c.rank,
          "the rank that serves them, and only them (across daemons, node "
          "`rank` of serve.nodes)",
          required, at_least(0));
}

struct serve_config {
  std::string model; // a `tutti export` / HF directory or a checkpoint
  // Or a published version (serve/model_registry.hpp): NAME@VERSION in
  // the registry directory, verified before it loads.
  std::string model_version, registry = "registry";
  std::string model_name; // what /v1/models lists; default: the directory
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  // The experts' weights as served: int8 quantizes a float checkpoint's
  // at load (an int8 checkpoint's are int8 whatever this says).
  weight_dtype weights = weight_dtype::fp32;
  // The rows the int8 experts multiply: int8 quantizes each per row.
  activation_dtype activations = activation_dtype::fp32;
  // Bytes a daemon may hold (weights and KV cache, serve_memory.hpp);
  // 0: no limit.
  int64_t memory_limit = 0;
  serve_limits limits;
  int64_t max_body_bytes = 1 << 20;
  int64_t http_threads = 0; // 0: max_sequences + max_queue + 8
  // Expert-parallel ranks in this process; 0: not given, then the
  // manifest's devices as far as the model's experts divide
  // (ep_ranks_for), one without a manifest.
  int64_t ep_size = 0;
  // Access (serve/src/api_auth.cpp): a file of API key hashes for /v1/*,
  // and a Prometheus web config (basic auth) for /metrics; "" = open.
  std::string api_keys, metrics_web_config;
  // A policy file whose tokens let other machines use /admin/
  // (security/admin_access.hpp); "" = this machine's clients only.
  std::string admin_policy;
  // Across daemons: mutual TLS on node 0's rendezvous and every daemon's
  // connection to it, with the cluster's node certificates (a job's
  // security section).
  security_config security;
  // Where `tutti serve` writes its log, tutti-serve-PORT.log.jsonl (what
  // `tutti logs CONFIG` shows); default: the config file's directory.
  std::string log_dir;
  // Where the experts live (serve_layout.hpp): a plan file in the format
  // of `tutti placement plan` ("" = contiguous), and offload.
  std::string placement;
  offload_config offload;
  // Each rank's rack (across daemons each node's) and live replanning by
  // rack (live_replan.hpp); `replan` is whether serve.replan was given.
  std::vector<std::string> racks;
  // A request starts on a rank of the rack holding most of its prompt's
  // experts (request_affinity.hpp).
  bool rack_affinity = false;
  bool replan = false;
  double max_cross_rack_share = 0.5;
  int64_t replan_window_steps = 50;

  // From an InferenceService manifest (defaults: one process, one device).
  bool from_manifest = false;
  std::string api_version;
  manifest_kind kind = manifest_kind::InferenceService;
  parallelism_kind parallelism = parallelism_kind::expert_parallel;
  int64_t num_gpus_per_node = 1;
  int64_t num_nodes = 1;
  bool rack_awareness = false;
  std::string intra_rack_backend, inter_rack_backend;

  int64_t devices() const { return num_gpus_per_node * num_nodes; }
  // The ranks to run for a model of `experts` experts.
  int64_t ep_ranks_for(int64_t experts) const;
};

// The keys of `serve:` (and of a manifest's spec.serve).
template <class Visitor>
void visit_fields(Visitor& v, serve_config& c) {
  using namespace config;
  auto& l = c.limits;
  v.field("model", c.model,
          "the model directory: a `tutti export` or Hugging Face directory, "
          "or a checkpoint (required unless model_version)");
  v.field("model_version", c.model_version,
          "NAME@VERSION published by `tutti publish`, instead of model: "
          "every file is checked against the registry's record before it "
          "loads");
  v.field("registry", c.registry, "the registry directory of model_version");
  v.field("model_name", c.model_name, "the name `/v1/models` lists",
          default_text{"a manifest's metadata.name, else the directory's "
                       "name"});
  host_port_ref listen{c.host, c.port};
  v.field("listen", listen,
          "where the HTTP front listens (`--listen` overrides; port 0 picks "
          "one)");
  v.field("max_batch_tokens", l.batch.max_batch_tokens,
          "rows per engine step: decodes first, then prompt chunks; at "
          "least max_sequences",
          at_least(1));
  v.field("max_sequences", l.batch.max_sequences, "requests decoding at once",
          at_least(1));
  v.field("max_queue", l.max_queue,
          "requests waiting beyond those; more get 429", at_least(1));
  v.field("max_prompt_tokens", l.max_prompt_tokens, "per request",
          at_least(0, "0 = the model's context"));
  v.field("max_output_tokens", l.max_output_tokens, "per request",
          at_least(0, "0 = the model's context"));
  v.field("request_timeout_s", l.request_timeout_s,
          "arrival to the last token; then 504", above(0));
  v.field("kv_cache_bytes", l.kv_cache_bytes,
          "the paged KV cache's budget (across the ranks of this process)",
          byte_size, above(0));
  v.field("kv_block_tokens", l.kv_block_tokens, "positions per KV block",
          at_least(1));
  v.field("max_body_bytes", c.max_body_bytes, "larger request bodies get 413",
          byte_size, above(0));
  v.field("http_threads", c.http_threads, "connections served at once",
          at_least(0, "0 = max_sequences + max_queue + 8"));
  v.field("ep_size", c.ep_size,
          "expert-parallel ranks in this process (must divide the experts, "
          "unless offload is set); across daemons each daemon's, the same "
          "on every daemon (daemon n holds ranks n x ep_size onward; all of "
          "them together must divide the experts)",
          at_least(1),
          default_text{"the manifest's devices (across daemons its "
                       "num_gpus_per_node), as far as they divide the "
                       "experts; else 1"});
  v.field("step_timeout_s", l.step_timeout_s,
          "a rank's step, an expert shard's restart included", above(0));
  v.field("expert_tier_restarts", l.expert_tier_restarts,
          "restarts of the whole expert tier within a minute (each after "
          "more than 3 shard restarts in a minute); one more and the "
          "process exits non-zero",
          at_least(0));
  v.field("drain_timeout_s", l.drain_timeout_s,
          "on SIGTERM (to any daemon of the service): new requests get 503 "
          "and those in flight have this long to finish",
          at_least(0.0));
  v.field("prefix_caching", l.batch.prefix_caching,
          "share the KV blocks of equal prompt prefixes");
  v.field("api_keys", c.api_keys,
          "a file of API key hashes: `/v1/*` needs `Authorization: Bearer "
          "KEY` (per-key rates)",
          default_text{"none: open"});
  v.field("metrics_web_config", c.metrics_web_config,
          "a Prometheus web config whose basic_auth_users guard `/metrics` "
          "and `/dashboard`; "
          "its tls_server_config puts the whole front on HTTPS",
          default_text{"none: open, HTTP"});
  v.field("admin_policy", c.admin_policy,
          "a policy file whose tokens let other machines use `/admin/` (the "
          "client commands; viewer to look, operator to steer); a token "
          "sent from this machine is checked too",
          default_text{"this machine only"});
  v.field("log_dir", c.log_dir,
          "where the log tutti-serve-PORT.log.jsonl goes (what `tutti logs "
          "CONFIG` shows)",
          default_text{"the config file's directory"});
  v.field("nodes", l.cluster.nodes,
          "across `tuttid` daemons: their host addresses (no port), node 0 "
          "(the HTTP front) first; ep_size ranks each",
          not_empty{"must be a list of the daemons' addresses, node 0 first"},
          default_text{"none: one process"});
  v.field("rendezvous_port", l.cluster.rendezvous_port,
          "with nodes: the port node 0's rendezvous listens on for the other "
          "daemons (which start within step_timeout_s of each other)",
          in_range(1, 65535, "[]"), default_text{"none"});
  v.field("data_parallel_attention", l.cluster.data_parallel_attention,
          "needs nodes; not with replan or offload yet: every rank of every "
          "daemon holds sequences (its own attention and KV cache of "
          "kv_cache_bytes / ep_size), not node 0's leader alone; node 0's "
          "scheduler places each request on the rank with most free blocks "
          "(or by rack_affinity) and its leader sends the other ranks their "
          "chunks before each step and gathers their logits after it; the same "
          "tokens (false: node 0 holds every sequence, the others experts "
          "only)");
  v.field("placement", c.placement,
          "a placement plan file (`tutti placement plan`'s): which rank holds "
          "each expert of each layer; its layers, experts and ranks must be "
          "the replica's (the format of moe_config.placement)",
          default_text{"contiguous"});
  v.field("offload", c.offload,
          "experts used below `threshold` of their layer's routed tokens in "
          "`stats` are served by rank `rank`, which then holds only those");
  v.field("racks", c.racks,
          "a rack name per rank (across daemons, per node of nodes): the "
          "share of rows crossing racks is measured "
          "(tutti_serve_cross_rack_share)",
          not_empty{"must be a list of rack names, one per rank (per node "
                    "of serve.nodes)"});
  auto replan = keys_of([&](auto& r) {
    r.field("max_cross_rack_share", c.max_cross_rack_share,
            "replan when a window sent more than this share of its rows "
            "across racks",
            with_message(in_range(0, 1, "(]"), "must be a share in (0, 1]"));
    r.field("window_steps", c.replan_window_steps, "steps per window",
            at_least(1));
  });
  v.field("replan", replan,
          "needs racks, not with offload (given: on): when a window of "
          "window_steps steps sent more than max_cross_rack_share of its "
          "rows across racks, experts move towards their rows' rack before "
          "the next step");
  v.field("rack_aware_alltoall", l.rack_aware_alltoall,
          "needs racks: dispatch and combine through one relay per rack, a "
          "token crossing to a rack once however many of its experts live "
          "there; the same tokens as the flat exchange, fewer bytes across "
          "racks");
  v.field("dispatch_dtype", l.dispatch,
          "the rows the dispatch sends to the expert ranks: fp32, or int8 "
          "/ fp8 (e4m3) with a float32 scale per row, dequantized there "
          "(about a quarter of the bytes; at every EP size, one included, "
          "so a request's tokens do not depend on it); outputs return fp32 "
          "(moe_config.dispatch_dtype)");
  v.field("weight_dtype", c.weights,
          "the experts' weights as served: fp32; int8 (weight-only, "
          "symmetric, a float32 scale per output channel; activations and "
          "accumulation stay float32), quantized at load from a float "
          "checkpoint; or bf16 (weights rounded to bfloat16 at load, "
          "activations rounded to bfloat16 in the product, float32 "
          "accumulation: AVX512-BF16 where the CPU has it, the same bits in "
          "float32 elsewhere); a checkpoint written by `tutti export "
          "--dtype int8` is served int8 as it is, whatever this says; embeddings, "
          "attention, norms, router and LM head stay float32; the same "
          "tokens at every concurrency and EP size");
  v.field("activation_dtype", c.activations,
          "the rows int8 experts multiply: fp32 (weight-only int8), or "
          "int8 (W8A8: each row quantized per row, symmetric, a float32 "
          "scale per row, as the int8 dispatch's rows; the codes' products "
          "summed exactly in 32-bit integers, AVX512-VNNI where the CPU has "
          "it, AVX2 or a portable loop elsewhere, the same bits); needs "
          "int8 experts (weight_dtype: int8 or an int8 export); the same "
          "tokens at every concurrency and EP size");
  v.field("memory_limit", c.memory_limit,
          "bytes each daemon may hold: the dense weights, its ranks' own "
          "experts and its KV cache, as `tutti serve --plan` predicts them; "
          "a daemon whose prediction is above it refuses to start, naming "
          "the figures",
          byte_size, at_least(0), default_text{"none"});
  v.field("rack_affinity", c.rack_affinity,
          "needs racks and a placement with token_experts (`tutti placement "
          "plan --method affinity`); not with replan or offload; across "
          "daemons needs data_parallel_attention: a request starts on a rank "
          "of the rack holding most of its prompt's experts (each token's "
          "own, as data.rack_affinity deals training windows), unless that "
          "rank has less than half the free KV blocks of the emptiest, or "
          "too few for the request's first chunk (it then starts on the "
          "emptiest rank); the same tokens, fewer bytes across racks");
}

// A serve file's one section.
template <class Visitor>
void visit_serve_file(Visitor& v, serve_config& c) {
  v.field("serve", c, "the service: tutti's own keys");
  v.field("security", c.security,
          "mutual TLS between the service's daemons (serve.nodes), as a "
          "job's");
}

// The InferenceService manifest: the users' deployment keys around
// spec.serve. They fill serve_config's manifest members (and
// metadata.name its model_name, unless spec.serve.model_name is given).
template <class Visitor>
void visit_manifest(Visitor& v, serve_config& c) {
  using namespace config;
  v.field("apiVersion", c.api_version,
          "the manifest's API version (any; tutti does not read it)", required,
          not_empty{"missing"});
  v.field("kind", c.kind, "what the manifest describes", required);
  ignored_value labels, name_space, annotations;
  auto metadata = keys_of([&](auto& m) {
    m.field("name", c.model_name,
            "the name `/v1/models` lists, unless spec.serve.model_name is "
            "given");
    m.field("namespace", name_space, "for deployment tools; not read");
    m.field("labels", labels, "for deployment tools; not read");
    m.field("annotations", annotations, "for deployment tools; not read");
  });
  v.field("metadata", metadata, "the service's name");
  auto parallelism = keys_of([&](auto& p) {
    p.field("type", c.parallelism, "how the model is split over devices");
    p.field("num_gpus_per_node", c.num_gpus_per_node, "devices per node",
            at_least(1));
    p.field("num_nodes", c.num_nodes,
            "nodes; spec.serve.nodes, when given, lists as many", at_least(1));
  });
  auto network = keys_of([&](auto& n) {
    n.field("intra_rack_backend", c.intra_rack_backend,
            "the link inside a rack by name");
    n.field("inter_rack_backend", c.inter_rack_backend,
            "the link between racks by name");
  });
  auto deployment = keys_of([&](auto& d) {
    d.field("rack_awareness", c.rack_awareness,
            "prefer in-rack traffic (spec.serve.racks and placement do it)");
    d.field("network", network, "the links by name");
  });
  auto spec = keys_of([&](auto& s) {
    s.field("parallelism", parallelism,
            "devices: with ep_size unset, this process runs as many "
            "expert-parallel ranks as divide the experts");
    s.field("deployment", deployment, "racks and links");
    s.field("serve", c, "tutti's own keys", same_keys_as{"serve"});
  });
  v.field("spec", spec, "the service", required);
}

// The config, or one line naming the key and why (prefixed with `source`).
expected<serve_config> parse_serve_config(const std::string& yaml_text,
                                          const std::string& source);
// parse_serve_config of the file; log_dir defaults to its directory.
expected<serve_config> load_serve_config(const std::string& path);

// Whether the YAML file at `path` is a serve config (a `serve:` section or
// an InferenceService manifest) rather than a training job's: tuttid runs
// whichever it is given.
bool is_serve_config_file(const std::string& path);

} // namespace tutti::serve
