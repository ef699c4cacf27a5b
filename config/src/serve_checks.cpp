// The checks across a serve config's keys, in the order a reader meets the
// keys. Each key is already within its own declared rules.

#include "serve_checks.hpp"

#include "tutti/config/version_ref.hpp"

namespace tutti::config {
namespace {

status require(bool ok, const std::string& key, const std::string& why) {
  return ok ? status() : refusal(key, why);
}

status check_model(const serve::serve_config& c, const std::string& prefix) {
  TUTTI_RETURN_IF_ERROR(require(
    c.model.empty() || c.model_version.empty(), prefix + "model_version",
    "give either model or model_version, not both"));
  if (c.model_version.empty())
    return {};
  std::string name, version;
  if (auto s = parse_version_ref(c.model_version, name, version); !s.ok())
    return refusal(prefix + "model_version", s.message());
  return {};
}

// An int8 checkpoint is int8 whatever weight_dtype says; the loader
// refuses float experts under int8 rows (serve::use_int8_rows).
status check_dtypes(const serve::serve_config& c, const std::string& prefix) {
  return require(c.activations == activation_dtype::fp32
                   || c.weights != weight_dtype::bf16,
                 prefix + "activation_dtype",
                 "int8 multiplies int8 experts; serve.weight_dtype is bf16 "
                 "(set it to int8)");
}

status check_limits(const serve::serve_limits& l, const std::string& prefix) {
  return require(l.batch.max_batch_tokens >= l.batch.max_sequences,
                 prefix + "max_batch_tokens",
                 "must be at least max_sequences ("
                   + std::to_string(l.batch.max_sequences) + "), got "
                   + std::to_string(l.batch.max_batch_tokens)
                   + ": every running request decodes a token each step");
}

// serve.nodes (the daemons' addresses, node 0 first) and the port node 0's
// rendezvous listens on, which a list of several nodes needs.
status check_nodes(const serve::serve_config& c, const std::string& prefix) {
  const auto& cl = c.limits.cluster;
  for (const auto& host : cl.nodes)
    TUTTI_RETURN_IF_ERROR(require(
      host.find(':') == std::string::npos, prefix + "nodes",
      "each entry must be a host address without a port, got '" + host + "'"));
  TUTTI_RETURN_IF_ERROR(require(
    !cl.spans_daemons() || cl.rendezvous_port != 0, prefix + "rendezvous_port",
    "missing (node 0's rendezvous port, which nodes lists of several "
    "daemons need)"));
  return require(!cl.data_parallel_attention || cl.spans_daemons(),
                 prefix + "data_parallel_attention",
                 "needs serve.nodes of several daemons (the ranks of one "
                 "process each hold sequences already)");
}

// serve.racks and what needs them; rack_affinity, data-parallel attention
// and offload, which do not all combine.
status check_racks(const serve::serve_config& c, const std::string& prefix) {
  const auto& cl = c.limits.cluster;
  TUTTI_RETURN_IF_ERROR(require(
    !c.limits.rack_aware_alltoall || !c.racks.empty(),
    prefix + "rack_aware_alltoall", "needs serve.racks (a rack per rank)"));
  if (c.rack_affinity) {
    TUTTI_RETURN_IF_ERROR(require(
      !c.racks.empty() && !c.placement.empty(), prefix + "rack_affinity",
      "needs serve.racks (a rack per rank) and serve.placement (a "
      "plan with token_experts: tutti placement plan --method "
      "affinity)"));
    TUTTI_RETURN_IF_ERROR(
      require(!c.offload.enabled(), prefix + "rack_affinity",
              "not with serve.offload (requests go by the plan's racks)"));
    TUTTI_RETURN_IF_ERROR(
      require(!cl.spans_daemons() || cl.data_parallel_attention,
              prefix + "rack_affinity",
              "across daemons needs serve.data_parallel_attention (else "
              "every sequence is node 0's, and no request can start in "
              "another rack)"));
  }
  return require(!cl.data_parallel_attention || !c.offload.enabled(),
                 prefix + "data_parallel_attention",
                 "not with serve.offload yet");
}

status check_replan(const serve::serve_config& c, const std::string& prefix) {
  if (!c.replan)
    return {};
  const auto key = prefix + "replan";
  TUTTI_RETURN_IF_ERROR(
    require(!c.rack_affinity, key,
            "not with serve.rack_affinity (requests go by the plan's racks, "
            "which a replan would move experts away from)"));
  TUTTI_RETURN_IF_ERROR(
    require(!c.limits.cluster.data_parallel_attention, key,
            "not with serve.data_parallel_attention yet (the replan counts "
            "node 0's rows only)"));
  TUTTI_RETURN_IF_ERROR(
    require(!c.racks.empty(), key, "needs serve.racks (a rack per rank)"));
  return require(!c.offload.enabled(), key,
                 "not with serve.offload (an offload layout is fixed at the "
                 "start)");
}

// The keys of serve: (or spec.serve:); sets serve_config::replan, which
// is whether serve.replan was given.
status check_section(serve::serve_config& c, const std::string& prefix,
                     const given_keys& given) {
  c.replan = given.count(prefix + "replan") > 0;
  TUTTI_RETURN_IF_ERROR(check_model(c, prefix));
  TUTTI_RETURN_IF_ERROR(check_limits(c.limits, prefix));
  TUTTI_RETURN_IF_ERROR(check_dtypes(c, prefix));
  TUTTI_RETURN_IF_ERROR(check_nodes(c, prefix));
  TUTTI_RETURN_IF_ERROR(check_racks(c, prefix));
  return check_replan(c, prefix);
}

status require_model(const serve::serve_config& c, const std::string& prefix) {
  return require(!c.model.empty() || !c.model_version.empty(), prefix + "model",
                 "missing (the model directory to serve, or model_version)");
}

} // namespace

status check_serve_file(serve::serve_config& c, const given_keys& given) {
  TUTTI_RETURN_IF_ERROR(check_section(c, "serve.", given));
  return require_model(c, "serve.");
}

status check_serve_manifest(serve::serve_config& c, const given_keys& given) {
  const std::string prefix = "spec.serve.";
  TUTTI_RETURN_IF_ERROR(check_section(c, prefix, given));
  const auto listed = static_cast<int64_t>(c.limits.cluster.nodes.size());
  TUTTI_RETURN_IF_ERROR(
    require(listed == 0 || !given.count("spec.parallelism.num_nodes")
              || listed == c.num_nodes,
            prefix + "nodes",
            "lists " + std::to_string(listed)
              + " daemons, but spec.parallelism.num_nodes is "
              + std::to_string(c.num_nodes)));
  return require_model(c, prefix);
}

} // namespace tutti::config
