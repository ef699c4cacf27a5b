// Shell answers as text for people: aligned tables, one row a line.

#include "tutti/render/shell.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "format.hpp"

namespace tutti::render {

namespace {

std::string status_text(const status_view& v) {
  const auto& s = v.job;
  std::ostringstream t;
  t << "state        " << s.state << "\n"
    << "step         " << s.step << " / " << s.steps << "\n"
    << "loss         " << fixed(s.loss, 4) << "\n"
    << "tokens/s     " << fixed(v.tokens_per_s, 0) << "\n"
    << "eta          " << fixed(v.eta_s, 0) << " s\n"
    << "checkpoint   step " << s.last_checkpoint << "\n"
    << "epoch        " << s.epoch << "  (recoveries " << s.recoveries
    << ", restarts " << s.restarts << ")\n"
    << "nodes        " << s.nodes.size() << " of " << v.nnodes
    << " connected\n";
  const auto& b = v.alltoall_bytes_by_link;
  if (b.size() == 4 && b[1] + b[2] + b[3] > 0) {
    // Bytes on links: a rank's copies to itself cross none.
    const double linked = double(b[1] + b[2] + b[3]);
    auto share = [&](int64_t x) { return fixed(100 * x / linked, 0) + "%"; };
    t << "all-to-all   " << fixed(linked / 1e6, 2) << " MB/step on links: "
      << "intra_node " << share(b[1]) << ", intra_rack " << share(b[2])
      << ", inter_rack " << share(b[3]) << "\n";
    if (v.tokens > 0)
      t << "cross-rack   " << fixed(double(b[3]) / double(v.tokens), 1)
        << " bytes/token\n";
  }
  if (!s.message.empty())
    t << "message      " << s.message << "\n";
  for (const auto& a : s.alerts)
    t << "ALERT        " << a << "\n";
  return t.str();
}

// A service's status (tutti serve): its JSON object, as the client
// carries it (client/service_client.hpp).
std::string service_status_text(const std::string& object) {
  const auto j = json::parse(object, nullptr, false);
  if (!j.is_object())
    return "service status: not JSON: " + object + "\n";
  auto n = [](const json& v, const char* key) {
    return std::to_string(v.value(key, int64_t{0}));
  };
  const auto& r = j.value("requests", json::object());
  const auto& kv = j.value("kv_cache_blocks", json::object());
  const auto& e = j.value("expert_shards", json::object());
  const auto& t = j.value("tokens", json::object());
  std::ostringstream o;
  o << "model        " << j.value("model", "") << " on "
    << j.value("address", "") << "\n"
    << "state        " << (j.value("ready", false) ? "ready" : "not ready")
    << "  (up " << fixed(j.value("uptime_s", 0.0), 1) << " s)\n"
    << "requests     running " << n(r, "running") << ", waiting "
    << n(r, "waiting") << ", finished " << n(r, "finished") << ", rejected "
    << n(r, "rejected") << "\n"
    << "kv cache     " << n(kv, "used") << " of " << n(kv, "total")
    << " blocks used\n"
    << "experts      " << n(e, "up") << " of " << n(e, "ranks")
    << " shards up, restarts " << n(e, "restarts") << "\n"
    << "tokens       generated " << n(t, "generated") << ", prompt "
    << n(t, "prompt") << "\n";
  return o.str();
}

std::string nodes_text(const std::vector<node_view>& nodes) {
  std::string t =
    "node  address                 rack      ranks    heartbeat  state\n";
  for (const auto& n : nodes) {
    const auto ranks = std::to_string(n.first_rank) + ".."
                       + std::to_string(n.first_rank + n.ranks - 1);
    const auto age = n.heartbeat_age_s >= 0 ? fixed(n.heartbeat_age_s, 1) + " s"
                                            : "-";
    char line[200];
    std::snprintf(line, sizeof(line), "%-5lld %-23s %-9s %-8s %9s  %s\n",
                  static_cast<long long>(n.node), n.address.c_str(),
                  n.rack.c_str(), ranks.c_str(), age.c_str(), n.state.c_str());
    t += line;
  }
  return t;
}

std::string actors_text(const std::vector<actor_info>& actors) {
  std::string t =
    "path                                kind               state     "
    "restarts  mailbox\n";
  for (const auto& r : actors) {
    const auto mailbox = r.mailbox < 0 ? "-" : std::to_string(r.mailbox);
    char line[256];
    std::snprintf(line, sizeof(line), "%-35s %-18s %-9s %8lld  %7s\n",
                  r.path.c_str(), r.kind.c_str(), r.state.c_str(),
                  static_cast<long long>(r.restarts), mailbox.c_str());
    t += line;
  }
  return t;
}

// Per layer: a header, then one row per expert with a bar of its average
// load (30 characters for the busiest).
std::string experts_text(const std::vector<layer_load>& layers) {
  std::ostringstream t;
  for (const auto& l : layers) {
    double max_avg = 0;
    for (const auto& e : l.experts)
      max_avg = std::max(max_avg, e.average);
    t << "layer " << l.layer << "  step " << l.step << "  max/mean "
      << fixed(l.max_over_mean, 2) << "  dropped " << l.dropped << " (total "
      << l.dropped_total << ")\n"
      << "expert   tokens   average   bias\n";
    for (const auto& e : l.experts) {
      const int bar = max_avg > 0
                        ? static_cast<int>(30 * e.average / max_avg + 0.5)
                        : 0;
      char line[160];
      std::snprintf(line, sizeof(line), "%6lld %8lld %9.1f %+7.4f  %s\n",
                    static_cast<long long>(e.expert),
                    static_cast<long long>(e.tokens), e.average, e.bias,
                    std::string(bar, '#').c_str());
      t << line;
    }
  }
  return t.str();
}

std::string lines_text(const std::vector<std::string>& lines) {
  std::string t;
  for (const auto& l : lines)
    t += l + "\n";
  return t;
}

} // namespace

std::string shell_text(const std::string& command, const shell_reply& reply) {
  if (!reply.ok)
    return reply.error + "\n";
  if (command == "status" && is_service_status(reply))
    return service_status_text(reply.lines[0]);
  if (command == "status")
    return status_text(reply.status);
  if (command == "nodes")
    return nodes_text(reply.nodes);
  if (command == "actors")
    return actors_text(reply.actors);
  if (command == "experts")
    return experts_text(reply.experts);
  if (command == "metrics" || command == "events" || command == "logs")
    return lines_text(reply.lines);
  return reply.message + "\n";
}

} // namespace tutti::render
