#include "tutti/gateway/gateway_config.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "tutti/serve/config_fields.hpp"
#include "tutti/serve/serve_config.hpp"

namespace tutti::gateway {

namespace {

using serve::check_keys;
using serve::read_bool;
using serve::read_double;
using serve::read_int;
using serve::read_string;
using serve::refuse;

status read_address(const std::string& key, const std::string& text,
                    replica_address& out) {
  if (auto s = serve::parse_listen_address(text, out.host, out.port); !s.ok())
    return refuse(key, s.message());
  if (out.port == 0)
    return refuse(key, "a replica needs a port, got '" + text + "'");
  return {};
}

status read_group(const YAML::Node& g, const std::string& prefix,
                  replica_group& out, bool canary, canary_policy& rollout) {
  std::set<std::string> keys{"version", "replicas", "serve_config", "count"};
  if (canary)
    keys.insert({"steps", "step_s", "min_requests", "max_error_rate",
                 "max_ttft_ratio", "max_tpot_ratio", "unhealthy_probes"});
  TUTTI_RETURN_IF_ERROR(check_keys(g, prefix, keys));
  TUTTI_RETURN_IF_ERROR(read_string(g, prefix, "version", out.version));
  if (out.version.empty())
    return refuse(prefix + "version", "missing (the version it serves)");
  if (const auto r = g["replicas"]) {
    if (!r.IsSequence())
      return refuse(prefix + "replicas", "must be a list of HOST:PORT");
    for (size_t i = 0; i < r.size(); ++i) {
      replica_address a;
      TUTTI_RETURN_IF_ERROR(
        read_address(prefix + "replicas[" + std::to_string(i) + "]",
                     r[i].IsScalar() ? r[i].Scalar() : std::string(), a));
      out.replicas.push_back(a);
    }
  }
  TUTTI_RETURN_IF_ERROR(
    read_string(g, prefix, "serve_config", out.serve_config));
  TUTTI_RETURN_IF_ERROR(read_int(g, prefix, "count", out.count, 0));
  if (!out.serve_config.empty() && !g["count"])
    out.count = 1;
  if (out.replicas.empty() && out.count == 0)
    return refuse(prefix + "replicas",
                  "missing (HOST:PORT of running engines, or serve_config "
                  "and count for the gateway to start)");
  if (out.count > 0 && out.serve_config.empty())
    return refuse(prefix + "serve_config", "missing (count needs it)");
  if (!canary)
    return {};
  if (const auto s = g["steps"]) {
    if (!s.IsSequence() || s.size() == 0)
      return refuse(prefix + "steps", "must be a list of percentages");
    rollout.steps.clear();
    double last = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      double v = -1;
      try {
        v = s[i].as<double>();
      } catch (...) {
      }
      if (!(v > last) || v > 100)
        return refuse(prefix + "steps",
                      "must rise, each in (0, 100], got '"
                        + (s[i].IsScalar() ? s[i].Scalar() : "?") + "'");
      rollout.steps.push_back(v);
      last = v;
    }
  }
  TUTTI_RETURN_IF_ERROR(read_double(g, prefix, "step_s", rollout.step_s));
  TUTTI_RETURN_IF_ERROR(
    read_int(g, prefix, "min_requests", rollout.min_requests, 1));
  TUTTI_RETURN_IF_ERROR(
    read_double(g, prefix, "max_error_rate", rollout.max_error_rate));
  TUTTI_RETURN_IF_ERROR(
    read_double(g, prefix, "max_ttft_ratio", rollout.max_ttft_ratio));
  TUTTI_RETURN_IF_ERROR(
    read_double(g, prefix, "max_tpot_ratio", rollout.max_tpot_ratio));
  TUTTI_RETURN_IF_ERROR(
    read_int(g, prefix, "unhealthy_probes", rollout.unhealthy_probes, 1));
  return {};
}

status read_autoscale(const YAML::Node& a, const std::string& prefix,
                      autoscale_policy& out) {
  TUTTI_RETURN_IF_ERROR(check_keys(
    a, prefix,
    {"min_replicas", "max_replicas", "warm_spares", "scale_up_queue",
     "scale_up_ttft_s", "scale_up_after_s", "scale_down_idle_s"}));
  out.enabled = true;
  TUTTI_RETURN_IF_ERROR(
    read_int(a, prefix, "min_replicas", out.min_replicas, 1));
  out.max_replicas = out.min_replicas;
  TUTTI_RETURN_IF_ERROR(
    read_int(a, prefix, "max_replicas", out.max_replicas, 1));
  if (out.max_replicas < out.min_replicas)
    return refuse(prefix + "max_replicas", "must be >= min_replicas");
  TUTTI_RETURN_IF_ERROR(read_int(a, prefix, "warm_spares", out.warm_spares, 0));
  TUTTI_RETURN_IF_ERROR(
    read_double(a, prefix, "scale_up_queue", out.scale_up_queue));
  TUTTI_RETURN_IF_ERROR(
    read_double(a, prefix, "scale_up_ttft_s", out.scale_up_ttft_s));
  TUTTI_RETURN_IF_ERROR(
    read_double(a, prefix, "scale_up_after_s", out.scale_up_after_s));
  TUTTI_RETURN_IF_ERROR(
    read_double(a, prefix, "scale_down_idle_s", out.scale_down_idle_s));
  return {};
}

status read_root(const YAML::Node& root, gateway_config& c) {
  TUTTI_RETURN_IF_ERROR(
    check_keys(root, "", {"gateway", "stable", "canary", "autoscale"}));
  if (const auto g = root["gateway"]) {
    const std::string p = "gateway.";
    TUTTI_RETURN_IF_ERROR(check_keys(
      g, p,
      {"listen", "request_timeout_s", "connect_timeout_s", "max_retries",
       "max_in_flight", "replica_max_outstanding", "health_interval_s",
       "health_timeout_s", "breaker_failures", "breaker_open_s",
       "http_threads", "api_keys", "metrics_web_config", "admin_policy"}));
    std::string listen;
    TUTTI_RETURN_IF_ERROR(read_string(g, p, "listen", listen));
    if (!listen.empty())
      if (auto s = serve::parse_listen_address(listen, c.host, c.port);
          !s.ok())
        return refuse(p + "listen", s.message());
    TUTTI_RETURN_IF_ERROR(
      read_double(g, p, "request_timeout_s", c.request_timeout_s));
    TUTTI_RETURN_IF_ERROR(
      read_double(g, p, "connect_timeout_s", c.connect_timeout_s));
    TUTTI_RETURN_IF_ERROR(read_int(g, p, "max_retries", c.max_retries, 0));
    TUTTI_RETURN_IF_ERROR(read_int(g, p, "max_in_flight", c.max_in_flight, 1));
    TUTTI_RETURN_IF_ERROR(read_int(g, p, "replica_max_outstanding",
                                   c.replica_max_outstanding, 1));
    TUTTI_RETURN_IF_ERROR(
      read_double(g, p, "health_interval_s", c.health_interval_s));
    TUTTI_RETURN_IF_ERROR(
      read_double(g, p, "health_timeout_s", c.health_timeout_s));
    TUTTI_RETURN_IF_ERROR(
      read_int(g, p, "breaker_failures", c.breaker_failures, 1));
    TUTTI_RETURN_IF_ERROR(
      read_double(g, p, "breaker_open_s", c.breaker_open_s));
    TUTTI_RETURN_IF_ERROR(read_int(g, p, "http_threads", c.http_threads, 0));
    TUTTI_RETURN_IF_ERROR(read_string(g, p, "api_keys", c.api_keys));
    TUTTI_RETURN_IF_ERROR(
      read_string(g, p, "metrics_web_config", c.metrics_web_config));
    TUTTI_RETURN_IF_ERROR(read_string(g, p, "admin_policy", c.admin_policy));
  }
  if (!root["stable"])
    return refuse("stable", "missing (the replicas of the stable version)");
  canary_policy unused;
  TUTTI_RETURN_IF_ERROR(
    read_group(root["stable"], "stable.", c.stable, false, unused));
  if (root["canary"]) {
    TUTTI_RETURN_IF_ERROR(
      read_group(root["canary"], "canary.", c.canary, true, c.rollout));
    if (c.canary.version == c.stable.version)
      return refuse("canary.version", "is the stable version too");
  }
  if (root["autoscale"]) {
    TUTTI_RETURN_IF_ERROR(
      read_autoscale(root["autoscale"], "autoscale.", c.autoscale));
    if (c.stable.serve_config.empty())
      return refuse("autoscale", "needs stable.serve_config (the gateway "
                                 "starts the replicas it adds)");
  }
  return {};
}

} // namespace

expected<gateway_config> parse_gateway_config(const std::string& text,
                                              const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return status::error(source + ": not YAML (line "
                         + std::to_string(e.mark.line + 1) + ")");
  }
  gateway_config c;
  status st;
  try {
    st = root.IsMap() ? read_root(root, c)
                      : status::error("must be a mapping");
  } catch (const YAML::Exception& e) {
    st = status::error("line " + std::to_string(e.mark.line + 1) + ": "
                       + e.msg);
  }
  if (!st.ok())
    return status::error(source + ": " + st.message());
  return c;
}

expected<gateway_config> load_gateway_config(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return status::error(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return parse_gateway_config(s.str(), path);
}

} // namespace tutti::gateway
