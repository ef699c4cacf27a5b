#pragma once
// The config of `tutti serve`: a `serve:` section of tutti's own keys, or
// an InferenceService manifest (apiVersion, kind: InferenceService,
// metadata.name, spec.parallelism, spec.deployment) whose `spec.serve`
// holds the same keys. Unknown keys and bad values are refused in one line
// naming the key.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/service.hpp"

namespace tutti::serve {

// serve.offload (offload_layout.hpp): experts whose share of their layer's
// routed tokens in `stats` (tutti experts stats --json) is below
// `threshold` are served by `rank` (across daemons, that node of
// serve.nodes). Unset: rank -1.
struct offload_config {
  std::string stats;
  double threshold = 0.0;
  int64_t rank = -1;
  bool enabled() const { return rank >= 0; }
};

struct serve_config {
  std::string model;      // a `tutti export` / HF directory or a checkpoint
  // Or a published version (model_registry.hpp): NAME@VERSION in the
  // registry directory (default "registry"), verified before it loads.
  std::string model_version, registry = "registry";
  std::string model_name; // what /v1/models lists; default: the directory
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  service_limits limits;
  int64_t max_body_bytes = 1 << 20;
  int64_t http_threads = 0; // 0: max_sequences + max_queue + 8
  // Expert-parallel ranks in this process (serve.ep_size); 0: not given,
  // then the manifest's devices as far as the model's experts divide
  // (ep_ranks_for), one without a manifest.
  int64_t ep_size = 0;
  // Access (serve/src/api_auth.cpp): a file of API key hashes for /v1/*,
  // and a Prometheus web config (basic auth) for /metrics; "" = open.
  std::string api_keys, metrics_web_config;
  // A policy file whose tokens let other machines use /admin/
  // (security/admin_access.hpp); "" = this machine's clients only.
  std::string admin_policy;
  // Where `tutti serve` writes its log, tutti-serve-PORT.log.jsonl (what
  // `tutti logs CONFIG` shows); default: the config file's directory.
  std::string log_dir;
  // Where the experts live (serve_layout.hpp): a plan file in the format
  // of `tutti placement plan` ("" = contiguous), and offload.
  std::string placement;
  offload_config offload;
  // Each rank's rack (serve.racks; across daemons each node's) and live
  // replanning by rack (serve.replan, live_replan.hpp).
  std::vector<std::string> racks;
  // serve.rack_affinity: a request starts on a rank of the rack holding
  // most of its prompt's experts (request_affinity.hpp).
  bool rack_affinity = false;
  bool replan = false;
  double max_cross_rack_share = 0.5;
  int64_t replan_window_steps = 50;

  // From an InferenceService manifest (defaults: one process, one device).
  bool from_manifest = false;
  std::string parallelism = "expert_parallel";
  int64_t num_gpus_per_node = 1;
  int64_t num_nodes = 1;
  bool rack_awareness = false;
  std::string intra_rack_backend, inter_rack_backend;

  int64_t devices() const { return num_gpus_per_node * num_nodes; }
  // The ranks to run for a model of `experts` experts.
  int64_t ep_ranks_for(int64_t experts) const;
};

expected<serve_config> parse_serve_config(const std::string& yaml_text,
                                          const std::string& source);
expected<serve_config> load_serve_config(const std::string& path);

// Whether the YAML file at `path` is a serve config (a `serve:` section or
// an InferenceService manifest) rather than a training job's: tuttid runs
// whichever it is given.
bool is_serve_config_file(const std::string& path);
// The directory to load: serve.model, or serve.model_version's files in the
// registry once every one matches its recorded hash (the first that does
// not is named). Sets cfg.model_name to the version's name if none is set.
expected<std::string> served_model_dir(serve_config& cfg);

// "HOST:PORT" into host and port; refuses anything else.
status parse_listen_address(const std::string& text, std::string& host,
                            uint16_t& port);

} // namespace tutti::serve
