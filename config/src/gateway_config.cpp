// parse_gateway_config: the keys read by their declarations, the defaults
// that depend on whether a key was given, then the checks across keys, in
// the order a reader meets the keys.

#include "tutti/config/gateway_config.hpp"

#include <fstream>
#include <sstream>

#include "yaml_reader.hpp"

namespace tutti::gateway {

namespace {

using config::given_keys;
using config::refusal;

status require(bool ok, const std::string& key, const std::string& why) {
  return ok ? status() : refusal(key, why);
}

// A group's replicas: given by address, or started from serve_config
// (count defaults to 1 there).
status settle_group(replica_group& g, const std::string& prefix,
                    const given_keys& given) {
  if (!g.serve_config.empty() && !given.count(prefix + "count"))
    g.count = 1;
  for (size_t i = 0; i < g.replicas.size(); ++i)
    TUTTI_RETURN_IF_ERROR(require(
      g.replicas[i].port != 0, prefix + "replicas[" + std::to_string(i) + "]",
      "a replica needs a port, got '" + value_text(g.replicas[i]) + "'"));
  TUTTI_RETURN_IF_ERROR(
    require(!g.replicas.empty() || g.count > 0, prefix + "replicas",
            "missing (HOST:PORT of running engines, or serve_config and "
            "count for the gateway to start)"));
  return require(g.count == 0 || !g.serve_config.empty(),
                 prefix + "serve_config", "missing (count needs it)");
}

status check_steps(const std::vector<double>& steps) {
  for (size_t i = 1; i < steps.size(); ++i)
    TUTTI_RETURN_IF_ERROR(require(
      steps[i] > steps[i - 1], "canary.steps",
      "must rise, each in (0, 100], got " + config::shortest_text(steps[i])
        + " after " + config::shortest_text(steps[i - 1])));
  return {};
}

status settle(gateway_config& c, const given_keys& given) {
  TUTTI_RETURN_IF_ERROR(settle_group(c.stable, "stable.", given));
  if (given.count("canary")) {
    TUTTI_RETURN_IF_ERROR(settle_group(c.canary, "canary.", given));
    TUTTI_RETURN_IF_ERROR(check_steps(c.rollout.steps));
    TUTTI_RETURN_IF_ERROR(require(c.canary.version != c.stable.version,
                                  "canary.version",
                                  "is the stable version too"));
  }
  auto& a = c.autoscale;
  a.enabled = given.count("autoscale") > 0;
  if (!a.enabled)
    return {};
  if (!given.count("autoscale.max_replicas"))
    a.max_replicas = a.min_replicas;
  TUTTI_RETURN_IF_ERROR(require(a.max_replicas >= a.min_replicas,
                                "autoscale.max_replicas",
                                "must be >= min_replicas"));
  return require(!c.stable.serve_config.empty(), "autoscale",
                 "needs stable.serve_config (the gateway starts the replicas "
                 "it adds)");
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
  given_keys given;
  status st;
  try {
    st = root.IsMap()
           ? config::read_document(root, "top level", c, "key", &given)
           : status::error("must be a mapping");
    if (st.ok())
      st = settle(c, given);
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
