// Shell answers as JSON for scripts (tutti shell --json): one value per
// answer, numbers with fixed decimals.

#include "tutti/render/shell.hpp"

#include "format.hpp"

namespace tutti::render {

namespace {

// [f(x0),f(x1),...]
template <class T, class F>
std::string array(const std::vector<T>& xs, F f) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? "," : "") + f(xs[i]);
  return out + "]";
}

std::string status_json(const status_view& v) {
  const auto& s = v.job;
  return "{\"state\":" + json_string(s.state)
         + ",\"step\":" + std::to_string(s.step)
         + ",\"steps\":" + std::to_string(s.steps)
         + ",\"loss\":" + fixed(s.loss, 6)
         + ",\"tokens_per_s\":" + fixed(v.tokens_per_s, 1)
         + ",\"eta_s\":" + fixed(v.eta_s, 1)
         + ",\"last_checkpoint\":" + std::to_string(s.last_checkpoint)
         + ",\"epoch\":" + std::to_string(s.epoch)
         + ",\"recoveries\":" + std::to_string(s.recoveries)
         + ",\"restarts\":" + std::to_string(s.restarts)
         + ",\"message\":" + json_string(s.message)
         + ",\"alerts\":" + array(s.alerts, json_string) + "}";
}

std::string node_json(const node_view& n) {
  return "{\"node\":" + std::to_string(n.node)
         + ",\"address\":" + json_string(n.address) + ",\"rack\":" + json_string(n.rack)
         + ",\"first_rank\":" + std::to_string(n.first_rank)
         + ",\"ranks\":" + std::to_string(n.ranks)
         + ",\"heartbeat_age_s\":" + fixed(n.heartbeat_age_s, 3)
         + ",\"state\":" + json_string(n.state) + "}";
}

std::string actor_json(const actor_info& r) {
  return "{\"path\":" + json_string(r.path) + ",\"kind\":" + json_string(r.kind)
         + ",\"state\":" + json_string(r.state)
         + ",\"restarts\":" + std::to_string(r.restarts)
         + ",\"mailbox\":" + std::to_string(r.mailbox) + "}";
}

std::string expert_json(const expert_load& e) {
  return "{\"expert\":" + std::to_string(e.expert)
         + ",\"tokens\":" + std::to_string(e.tokens)
         + ",\"average\":" + fixed(e.average, 3)
         + ",\"bias\":" + fixed(e.bias, 6) + "}";
}

std::string layer_json(const layer_load& l) {
  return "{\"layer\":" + std::to_string(l.layer)
         + ",\"step\":" + std::to_string(l.step)
         + ",\"max_over_mean\":" + fixed(l.max_over_mean, 4)
         + ",\"dropped\":" + std::to_string(l.dropped)
         + ",\"experts\":" + array(l.experts, expert_json) + "}";
}

} // namespace

std::string shell_json(const std::string& command, const shell_reply& reply) {
  if (!reply.ok)
    return "{\"error\":" + json_string(reply.error) + "}";
  if (command == "status")
    return status_json(reply.status);
  if (command == "nodes")
    return array(reply.nodes, node_json);
  if (command == "actors")
    return array(reply.actors, actor_json);
  if (command == "experts")
    return array(reply.experts, layer_json);
  if (command == "metrics") {
    // One string: the Prometheus text as the text form shows it.
    std::string text;
    for (const auto& l : reply.lines)
      text += l + "\n";
    return json_string(text);
  }
  if (command == "events" || command == "logs")
    return array(reply.lines, json_string);
  return json_string(reply.message);
}

} // namespace tutti::render
