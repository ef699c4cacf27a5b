#include "tutti/serve/serve_config.hpp"

#include "tutti/serve/config_fields.hpp"
#include "tutti/serve/model_registry.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace tutti::serve {

namespace {

// serve.nodes (the daemons' addresses, node 0 first) and the port node 0's
// rendezvous listens on, which a list of several nodes needs.
status read_nodes(const YAML::Node& s, const std::string& prefix,
                  serve_config& c) {
  auto& cl = c.limits.cluster;
  if (const auto n = s["nodes"]) {
    if (!n.IsSequence() || n.size() == 0)
      return refuse(prefix + "nodes",
                    "must be a list of the daemons' addresses, node 0 first");
    for (const auto& host : n) {
      if (!host.IsScalar() || host.Scalar().empty()
          || host.Scalar().find(':') != std::string::npos)
        return refuse(prefix + "nodes",
                      "each entry must be a host address without a port");
      cl.nodes.push_back(host.Scalar());
    }
  }
  int64_t port = 0;
  TUTTI_RETURN_IF_ERROR(read_int(s, prefix, "rendezvous_port", port, 1));
  if (port > 65535)
    return refuse(prefix + "rendezvous_port", "must be 1..65535");
  cl.rendezvous_port = static_cast<uint16_t>(port);
  if (cl.spans_daemons() && port == 0)
    return refuse(prefix + "rendezvous_port",
                  "missing (node 0's rendezvous port, which nodes lists "
                  "of several daemons need)");
  if (cl.spans_daemons() && c.ep_size > 1)
    return refuse(prefix + "ep_size",
                  "must be 1 across daemons (one rank each), got "
                    + std::to_string(c.ep_size));
  TUTTI_RETURN_IF_ERROR(read_bool(s, prefix, "data_parallel_attention",
                                  cl.data_parallel_attention));
  if (cl.data_parallel_attention && !cl.spans_daemons())
    return refuse(prefix + "data_parallel_attention",
                  "needs serve.nodes of several daemons (the ranks of one "
                  "process each hold sequences already)");
  return {};
}

// serve.offload: {stats, threshold, rank}, every key given.
status read_offload(const YAML::Node& s, const std::string& prefix,
                    offload_config& o) {
  const auto n = s["offload"];
  if (!n)
    return {};
  const auto pre = prefix + "offload.";
  TUTTI_RETURN_IF_ERROR(check_keys(n, pre, {"stats", "threshold", "rank"}));
  for (const char* key : {"stats", "threshold", "rank"})
    if (!n[key])
      return refuse(pre + key, "missing (serve.offload needs stats, "
                               "threshold and rank)");
  TUTTI_RETURN_IF_ERROR(read_string(n, pre, "stats", o.stats));
  TUTTI_RETURN_IF_ERROR(read_double(n, pre, "threshold", o.threshold));
  if (!(o.threshold > 0.0 && o.threshold <= 1.0))
    return refuse(pre + "threshold", "must be a share in (0, 1]");
  TUTTI_RETURN_IF_ERROR(read_int(n, pre, "rank", o.rank, 0));
  return {};
}

// serve.racks (one name per rank) and serve.replan: {max_cross_rack_share,
// window_steps}.
status read_replan(const YAML::Node& s, const std::string& prefix,
                   serve_config& c) {
  if (const auto n = s["racks"]) {
    if (!n.IsSequence() || n.size() == 0)
      return refuse(prefix + "racks", "must be a list of rack names, one per "
                                      "rank (per node of serve.nodes)");
    for (const auto& r : n) {
      if (!r.IsScalar() || r.Scalar().empty())
        return refuse(prefix + "racks", "each entry must be a rack name");
      c.racks.push_back(r.Scalar());
    }
  }
  TUTTI_RETURN_IF_ERROR(read_bool(s, prefix, "rack_aware_alltoall",
                                  c.limits.rack_aware_alltoall));
  if (c.limits.rack_aware_alltoall && c.racks.empty())
    return refuse(prefix + "rack_aware_alltoall",
                  "needs serve.racks (a rack per rank)");
  TUTTI_RETURN_IF_ERROR(read_bool(s, prefix, "rack_affinity", c.rack_affinity));
  if (c.rack_affinity && (c.racks.empty() || c.placement.empty()))
    return refuse(prefix + "rack_affinity",
                  "needs serve.racks (a rack per rank) and serve.placement (a "
                  "plan with token_experts: tutti placement plan --method "
                  "affinity)");
  if (c.rack_affinity && c.offload.enabled())
    return refuse(prefix + "rack_affinity",
                  "not with serve.offload (requests go by the plan's racks)");
  const auto& cl = c.limits.cluster;
  if (c.rack_affinity && cl.spans_daemons() && !cl.data_parallel_attention)
    return refuse(prefix + "rack_affinity",
                  "across daemons needs serve.data_parallel_attention (else "
                  "every sequence is node 0's, and no request can start in "
                  "another rack)");
  if (cl.data_parallel_attention && c.offload.enabled())
    return refuse(prefix + "data_parallel_attention",
                  "not with serve.offload yet");
  const auto n = s["replan"];
  if (!n)
    return {};
  if (c.rack_affinity)
    return refuse(prefix + "replan",
                  "not with serve.rack_affinity (requests go by the plan's "
                  "racks, which a replan would move experts away from)");
  if (cl.data_parallel_attention)
    return refuse(prefix + "replan",
                  "not with serve.data_parallel_attention yet (the replan "
                  "counts node 0's rows only)");
  const auto pre = prefix + "replan.";
  TUTTI_RETURN_IF_ERROR(
    check_keys(n, pre, {"max_cross_rack_share", "window_steps"}));
  c.replan = true;
  TUTTI_RETURN_IF_ERROR(read_double(n, pre, "max_cross_rack_share",
                                    c.max_cross_rack_share));
  if (!(c.max_cross_rack_share > 0.0 && c.max_cross_rack_share <= 1.0))
    return refuse(pre + "max_cross_rack_share", "must be a share in (0, 1]");
  TUTTI_RETURN_IF_ERROR(
    read_int(n, pre, "window_steps", c.replan_window_steps, 1));
  if (c.racks.empty())
    return refuse(prefix + "replan", "needs serve.racks (a rack per rank)");
  if (c.offload.enabled())
    return refuse(prefix + "replan", "not with serve.offload (an offload "
                                     "layout is fixed at the start)");
  return {};
}

// The `serve` keys, in `serve:` or in a manifest's `spec.serve:`.
status read_serve_section(const YAML::Node& s, const std::string& prefix,
                          serve_config& c) {
  TUTTI_RETURN_IF_ERROR(check_keys(s, prefix,
                                   {"model",
                                    "model_name",
                                    "listen",
                                    "max_batch_tokens",
                                    "max_sequences",
                                    "max_queue",
                                    "max_prompt_tokens",
                                    "max_output_tokens",
                                    "request_timeout_s",
                                    "kv_cache_bytes",
                                    "kv_block_tokens",
                                    "max_body_bytes",
                                    "http_threads",
                                    "ep_size",
                                    "step_timeout_s",
                                    "prefix_caching",
                                    "api_keys",
                                    "metrics_web_config",
                                    "nodes",
                                    "rendezvous_port",
                                    "model_version",
                                    "registry",
                                    "log_dir",
                                    "placement",
                                    "offload",
                                    "racks",
                                    "replan",
                                    "rack_aware_alltoall",
                                    "data_parallel_attention",
                                    "rack_affinity",
                                    "admin_policy"}));
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "model", c.model));
  TUTTI_RETURN_IF_ERROR(
    read_string(s, prefix, "model_version", c.model_version));
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "registry", c.registry));
  if (!c.model.empty() && !c.model_version.empty())
    return refuse(prefix + "model_version",
                  "give either model or model_version, not both");
  if (!c.model_version.empty()) {
    std::string n, v;
    if (auto st = parse_version_ref(c.model_version, n, v); !st.ok())
      return refuse(prefix + "model_version", st.message());
  }
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "model_name", c.model_name));
  std::string listen;
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "listen", listen));
  if (!listen.empty())
    if (auto st = parse_listen_address(listen, c.host, c.port); !st.ok())
      return refuse(prefix + "listen", st.message());
  auto& l = c.limits;
  TUTTI_RETURN_IF_ERROR(
    read_int(s, prefix, "max_batch_tokens", l.batch.max_batch_tokens, 1));
  TUTTI_RETURN_IF_ERROR(
    read_int(s, prefix, "max_sequences", l.batch.max_sequences, 1));
  TUTTI_RETURN_IF_ERROR(read_int(s, prefix, "max_queue", l.max_queue, 1));
  TUTTI_RETURN_IF_ERROR(
    read_int(s, prefix, "max_prompt_tokens", l.max_prompt_tokens, 0));
  TUTTI_RETURN_IF_ERROR(
    read_int(s, prefix, "max_output_tokens", l.max_output_tokens, 0));
  TUTTI_RETURN_IF_ERROR(
    read_double(s, prefix, "request_timeout_s", l.request_timeout_s));
  TUTTI_RETURN_IF_ERROR(
    read_bytes(s, prefix, "kv_cache_bytes", l.kv_cache_bytes));
  TUTTI_RETURN_IF_ERROR(
    read_int(s, prefix, "kv_block_tokens", l.kv_block_tokens, 1));
  TUTTI_RETURN_IF_ERROR(
    read_bytes(s, prefix, "max_body_bytes", c.max_body_bytes));
  TUTTI_RETURN_IF_ERROR(read_int(s, prefix, "http_threads", c.http_threads, 0));
  TUTTI_RETURN_IF_ERROR(read_int(s, prefix, "ep_size", c.ep_size, 1));
  TUTTI_RETURN_IF_ERROR(
    read_double(s, prefix, "step_timeout_s", l.step_timeout_s));
  TUTTI_RETURN_IF_ERROR(
    read_bool(s, prefix, "prefix_caching", l.batch.prefix_caching));
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "api_keys", c.api_keys));
  TUTTI_RETURN_IF_ERROR(
    read_string(s, prefix, "metrics_web_config", c.metrics_web_config));
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "admin_policy", c.admin_policy));
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "log_dir", c.log_dir));
  TUTTI_RETURN_IF_ERROR(read_nodes(s, prefix, c));
  TUTTI_RETURN_IF_ERROR(read_string(s, prefix, "placement", c.placement));
  TUTTI_RETURN_IF_ERROR(read_offload(s, prefix, c.offload));
  TUTTI_RETURN_IF_ERROR(read_replan(s, prefix, c));
  return {};
}

status read_manifest(const YAML::Node& root, serve_config& c) {
  TUTTI_RETURN_IF_ERROR(
    check_keys(root, "", {"apiVersion", "kind", "metadata", "spec"}));
  std::string api, kind;
  TUTTI_RETURN_IF_ERROR(read_string(root, "", "apiVersion", api));
  TUTTI_RETURN_IF_ERROR(read_string(root, "", "kind", kind));
  if (api.empty())
    return refuse("apiVersion", "missing");
  if (kind != "InferenceService")
    return refuse("kind", "must be InferenceService, got '" + kind + "'");
  c.from_manifest = true;
  if (root["metadata"]) {
    TUTTI_RETURN_IF_ERROR(
      check_keys(root["metadata"], "metadata.",
                 {"name", "labels", "namespace", "annotations"}));
    TUTTI_RETURN_IF_ERROR(
      read_string(root["metadata"], "metadata.", "name", c.model_name));
  }
  if (!root["spec"])
    return refuse("spec", "missing");
  const auto spec = root["spec"];
  TUTTI_RETURN_IF_ERROR(
    check_keys(spec, "spec.", {"parallelism", "deployment", "serve"}));
  if (const auto p = spec["parallelism"]) {
    const std::string pre = "spec.parallelism.";
    TUTTI_RETURN_IF_ERROR(
      check_keys(p, pre, {"type", "num_gpus_per_node", "num_nodes"}));
    TUTTI_RETURN_IF_ERROR(read_string(p, pre, "type", c.parallelism));
    if (c.parallelism != "expert_parallel")
      return refuse(pre + "type", "only expert_parallel is supported, got '"
                                    + c.parallelism + "'");
    TUTTI_RETURN_IF_ERROR(
      read_int(p, pre, "num_gpus_per_node", c.num_gpus_per_node, 1));
    TUTTI_RETURN_IF_ERROR(read_int(p, pre, "num_nodes", c.num_nodes, 1));
  }
  if (const auto d = spec["deployment"]) {
    const std::string pre = "spec.deployment.";
    TUTTI_RETURN_IF_ERROR(check_keys(d, pre, {"rack_awareness", "network"}));
    TUTTI_RETURN_IF_ERROR(
      read_bool(d, pre, "rack_awareness", c.rack_awareness));
    if (const auto n = d["network"]) {
      const std::string npre = pre + "network.";
      TUTTI_RETURN_IF_ERROR(
        check_keys(n, npre, {"intra_rack_backend", "inter_rack_backend"}));
      TUTTI_RETURN_IF_ERROR(
        read_string(n, npre, "intra_rack_backend", c.intra_rack_backend));
      TUTTI_RETURN_IF_ERROR(
        read_string(n, npre, "inter_rack_backend", c.inter_rack_backend));
    }
  }
  if (spec["serve"])
    TUTTI_RETURN_IF_ERROR(read_serve_section(spec["serve"], "spec.serve.", c));
  const auto listed = static_cast<int64_t>(c.limits.cluster.nodes.size());
  if (listed > 0 && spec["parallelism"] && spec["parallelism"]["num_nodes"]
      && listed != c.num_nodes)
    return refuse("spec.serve.nodes",
                  "lists " + std::to_string(listed)
                    + " daemons, but spec.parallelism.num_nodes is "
                    + std::to_string(c.num_nodes));
  return {};
}

} // namespace

status parse_listen_address(const std::string& text, std::string& host,
                            uint16_t& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return status::error("must be HOST:PORT, got '" + text + "'");
  const auto p = text.substr(colon + 1);
  if (p.empty() || p.size() > 5
      || p.find_first_not_of("0123456789") != std::string::npos
      || std::stoi(p) > 65535)
    return status::error("port must be 0..65535, got '" + p + "'");
  host = text.substr(0, colon);
  port = static_cast<uint16_t>(std::stoi(p));
  return {};
}

expected<serve_config> parse_serve_config(const std::string& text,
                                          const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return status::error(source + ": not YAML (line "
                         + std::to_string(e.mark.line + 1) + ")");
  }
  serve_config c;
  status st;
  try {
    if (!root.IsMap())
      return status::error(source + ": must be a mapping");
    if (root["kind"] || root["apiVersion"])
      st = read_manifest(root, c);
    else {
      st = check_keys(root, "", {"serve"});
      if (st.ok() && root["serve"])
        st = read_serve_section(root["serve"], "serve.", c);
    }
  } catch (const YAML::Exception& e) {
    st = status::error("line " + std::to_string(e.mark.line + 1) + ": "
                       + e.msg);
  }
  if (!st.ok())
    return status::error(source + ": " + st.message());
  if (c.model.empty() && c.model_version.empty())
    return status::error(
      source + ": " + (c.from_manifest ? "spec.serve.model" : "serve.model")
      + ": missing (the model directory to serve, or model_version)");
  return c;
}

int64_t serve_config::ep_ranks_for(int64_t experts) const {
  if (limits.cluster.spans_daemons())
    return 1; // per daemon
  if (ep_size > 0)
    return ep_size;
  int64_t ranks = 1;
  for (int64_t n = 1; n <= std::min(devices(), experts); ++n)
    if (experts % n == 0)
      ranks = n;
  return ranks;
}

expected<std::string> served_model_dir(serve_config& cfg) {
  if (cfg.model_version.empty())
    return cfg.model;
  std::string name, version;
  TUTTI_RETURN_IF_ERROR(parse_version_ref(cfg.model_version, name, version));
  auto v = verify_model_version(cfg.registry, name, version);
  if (!v)
    return v.error();
  if (cfg.model_name.empty())
    cfg.model_name = name;
  return v.value().model_dir.string();
}

expected<serve_config> load_serve_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return status::error(path + ": a directory, not a config file");
  std::ifstream in(path);
  if (!in)
    return status::error(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  auto cfg = parse_serve_config(s.str(), path);
  if (cfg && cfg.value().log_dir.empty())
    cfg.value().log_dir =
      std::filesystem::absolute(path, ec).parent_path().string();
  return cfg;
}

bool is_serve_config_file(const std::string& path) {
  try {
    const auto root = YAML::LoadFile(path);
    return root.IsMap() && (root["serve"] || root["kind"]);
  } catch (const YAML::Exception&) {
    return false; // the job config's loader names what is wrong
  }
}

} // namespace tutti::serve
