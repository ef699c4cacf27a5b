// Shell answers as JSON for scripts (tutti shell --json, tutti status
// --json): one value per answer; numbers rounded as the text shows them,
// except the loss, which round-trips (NaN is null).

#include "tutti/render/shell.hpp"

#include "format.hpp"

namespace tutti::render {

namespace {

json status_json(const status_view& v) {
  const auto& s = v.job;
  json j;
  j["state"] = s.state;
  j["step"] = s.step;
  j["steps"] = s.steps;
  j["epoch"] = s.epoch;
  j["last_checkpoint"] = s.last_checkpoint;
  j["loss"] = s.loss;
  j["tokens_per_s"] = rounded(v.tokens_per_s, 1);
  j["eta_s"] = rounded(v.eta_s, 1);
  j["recoveries"] = s.recoveries;
  j["restarts"] = s.restarts;
  j["nodes"] = s.nodes;
  j["nnodes"] = v.nnodes;
  j["message"] = s.message;
  j["alerts"] = s.alerts;
  // The last step's all-to-all bytes by link class, every rank's.
  const auto& b = v.alltoall_bytes_by_link;
  auto& links = j["alltoall_bytes_by_link"];
  const char* names[] = {"same_rank", "intra_node", "intra_rack",
                         "inter_rack"};
  for (size_t c = 0; c < 4; ++c)
    links[names[c]] = c < b.size() ? b[c] : 0;
  j["cross_rack_bytes_per_token"] =
    b.size() == 4 && v.tokens > 0
      ? rounded(double(b[3]) / double(v.tokens), 1)
      : 0.0;
  return j;
}

json nodes_json(const std::vector<node_view>& nodes) {
  json rows = json::array();
  for (const auto& n : nodes)
    rows.push_back({{"node", n.node},
                    {"address", n.address},
                    {"rack", n.rack},
                    {"first_rank", n.first_rank},
                    {"ranks", n.ranks},
                    {"heartbeat_age_s", rounded(n.heartbeat_age_s, 3)},
                    {"state", n.state}});
  return rows;
}

json actors_json(const std::vector<actor_info>& actors) {
  json rows = json::array();
  for (const auto& r : actors)
    rows.push_back({{"path", r.path},
                    {"kind", r.kind},
                    {"state", r.state},
                    {"restarts", r.restarts},
                    {"mailbox", r.mailbox}});
  return rows;
}

json experts_json(const std::vector<layer_load>& layers) {
  json rows = json::array();
  for (const auto& l : layers) {
    json experts = json::array();
    for (const auto& e : l.experts)
      experts.push_back({{"expert", e.expert},
                         {"tokens", e.tokens},
                         {"average", rounded(e.average, 3)},
                         {"bias", rounded(e.bias, 6)}});
    rows.push_back({{"layer", l.layer},
                    {"step", l.step},
                    {"max_over_mean", rounded(l.max_over_mean, 4)},
                    {"dropped", l.dropped},
                    {"experts", std::move(experts)}});
  }
  return rows;
}

} // namespace

std::string shell_json(const std::string& command, const shell_reply& reply) {
  if (!reply.ok)
    return dump(json{{"error", reply.error}});
  if (command == "status" && is_service_status(reply))
    return dump(json::parse(reply.lines[0], nullptr, false));
  if (command == "status")
    return dump(status_json(reply.status));
  if (command == "nodes")
    return dump(nodes_json(reply.nodes));
  if (command == "actors")
    return dump(actors_json(reply.actors));
  if (command == "experts")
    return dump(experts_json(reply.experts));
  if (command == "metrics") {
    // One string: the Prometheus text as the text form shows it.
    std::string text;
    for (const auto& l : reply.lines)
      text += l + "\n";
    return dump(json(text));
  }
  if (command == "events" || command == "logs")
    return dump(json(reply.lines));
  // stop's JSON answer has always been the bare word.
  if (command == "stop")
    return dump(json("stopping"));
  return dump(json(reply.message));
}

} // namespace tutti::render
