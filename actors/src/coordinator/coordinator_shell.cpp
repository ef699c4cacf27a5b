// The shell's commands, answered by the coordinator (tutti shell connects
// to it, directly or through any daemon). Each answer has a text for
// people and JSON for scripts; a refused command is ok = false with one
// line saying why.

#include <caf/send.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "coordinator/coordinator_state.hpp"
#include "tutti/actors/log.hpp"

namespace tutti {

namespace {

shell_reply refuse(const std::string& why) {
  return {false, why + "\n", "{\"error\":\"" + json_escape(why) + "\"}"};
}

std::string fixed(double x, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

std::string quoted(const std::string& s) {
  return "\"" + json_escape(s) + "\"";
}

bool parse_int(const std::string& text, int64_t& out) {
  try {
    size_t used = 0;
    out = std::stoll(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

shell_reply status_reply(const coordinator_state& st) {
  auto s = describe_job(st);
  const auto& seen = st.seen;
  const double tps = seen.have_last && seen.last.step_time_s > 0
                       ? seen.last.tokens / seen.last.step_time_s
                       : 0;
  const double per_step =
    seen.steps_seen > 0 ? seen.elapsed_s / seen.steps_seen : 0;
  const double eta = per_step * static_cast<double>(s.steps - s.step);
  std::ostringstream t;
  t << "state        " << s.state << "\n"
    << "step         " << s.step << " / " << s.steps << "\n"
    << "loss         " << fixed(s.loss, 4) << "\n"
    << "tokens/s     " << fixed(tps, 0) << "\n"
    << "eta          " << fixed(eta, 0) << " s\n"
    << "checkpoint   step " << s.last_checkpoint << "\n"
    << "epoch        " << s.epoch << "  (recoveries " << s.recoveries
    << ", restarts " << s.restarts << ")\n"
    << "nodes        " << s.nodes.size() << " of " << st.cfg.cluster.nnodes
    << " connected\n";
  if (!s.message.empty())
    t << "message      " << s.message << "\n";
  for (const auto& a : s.alerts)
    t << "ALERT        " << a << "\n";
  std::string alerts;
  for (const auto& a : s.alerts)
    alerts += (alerts.empty() ? "" : ",") + quoted(a);
  auto json = "{\"state\":" + quoted(s.state)
              + ",\"step\":" + std::to_string(s.step)
              + ",\"steps\":" + std::to_string(s.steps)
              + ",\"loss\":" + fixed(s.loss, 6)
              + ",\"tokens_per_s\":" + fixed(tps, 1)
              + ",\"eta_s\":" + fixed(eta, 1)
              + ",\"last_checkpoint\":" + std::to_string(s.last_checkpoint)
              + ",\"epoch\":" + std::to_string(s.epoch)
              + ",\"recoveries\":" + std::to_string(s.recoveries)
              + ",\"restarts\":" + std::to_string(s.restarts)
              + ",\"message\":" + quoted(s.message) + ",\"alerts\":["
              + alerts + "]}";
  return {true, t.str(), json};
}

shell_reply nodes_reply(const coordinator_state& st) {
  std::ostringstream t;
  std::string json = "[";
  t << "node  address                 rack      ranks    heartbeat  state\n";
  const auto now = coordinator_clock::now();
  const auto per = st.cfg.cluster.nproc_per_node;
  for (int64_t n = 0; n < st.cfg.cluster.nnodes; ++n) {
    auto a = st.cfg.cluster.node(n);
    auto i = st.nodes.find(n);
    const bool up = i != st.nodes.end();
    if (up)
      a.rack = i->second.info.rack;
    const double age =
      up ? std::chrono::duration<double>(now - i->second.last_heartbeat).count()
         : -1;
    const auto state = st.draining.count(n) ? "drained" : up ? "up" : "lost";
    const auto ranks = std::to_string(n * per) + ".."
                       + std::to_string(n * per + per - 1);
    char line[200];
    std::snprintf(line, sizeof(line), "%-5lld %-23s %-9s %-8s %9s  %s\n",
                  static_cast<long long>(n),
                  (a.host + ":" + std::to_string(a.port)).c_str(),
                  a.rack.c_str(), ranks.c_str(),
                  up ? (fixed(age, 1) + " s").c_str() : "-", state);
    t << line;
    json += std::string(n ? "," : "") + "{\"node\":" + std::to_string(n)
            + ",\"address\":" + quoted(a.host + ":" + std::to_string(a.port))
            + ",\"rack\":" + quoted(a.rack) + ",\"first_rank\":"
            + std::to_string(n * per) + ",\"ranks\":" + std::to_string(per)
            + ",\"heartbeat_age_s\":" + fixed(age, 3)
            + ",\"state\":" + quoted(state) + "}";
  }
  return {true, t.str(), json + "]"};
}

shell_reply experts_reply(const coordinator_state& st, int64_t layer) {
  const auto& seen = st.seen;
  const auto experts = st.cfg.moe.num_experts;
  const auto layers = st.cfg.model.num_hidden_layers;
  if (!seen.have_last)
    return refuse("experts: no step has finished yet");
  if (layer >= layers)
    return refuse("experts: LAYER must be below " + std::to_string(layers)
                  + ", got " + std::to_string(layer));
  std::ostringstream t;
  std::string json = "[";
  const int64_t first = layer < 0 ? 0 : layer;
  const int64_t last = layer < 0 ? layers : layer + 1;
  for (int64_t l = first; l < last; ++l) {
    double max_avg = 0, sum_last = 0, max_last = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const auto k = static_cast<size_t>(l * experts + e);
      max_avg = std::max(max_avg, seen.expert_sum[k] / seen.expert_steps);
      sum_last += static_cast<double>(seen.last.expert_counts[k]);
      max_last = std::max(max_last,
                          static_cast<double>(seen.last.expert_counts[k]));
    }
    const double ratio = sum_last > 0 ? max_last / (sum_last / experts) : 0;
    t << "layer " << l << "  step " << seen.last.step << "  max/mean "
      << fixed(ratio, 2) << "  dropped " << seen.last.dropped_tokens
      << " (total " << seen.dropped_total << ")\n"
      << "expert   tokens   average   bias\n";
    json += std::string(l > first ? "," : "") + "{\"layer\":"
            + std::to_string(l) + ",\"step\":" + std::to_string(seen.last.step)
            + ",\"max_over_mean\":" + fixed(ratio, 4)
            + ",\"dropped\":" + std::to_string(seen.last.dropped_tokens)
            + ",\"experts\":[";
    for (int64_t e = 0; e < experts; ++e) {
      const auto k = static_cast<size_t>(l * experts + e);
      const double avg = seen.expert_sum[k] / seen.expert_steps;
      const double bias =
        k < seen.last.router_bias.size() ? seen.last.router_bias[k] : 0;
      const int bar = max_avg > 0 ? static_cast<int>(30 * avg / max_avg + 0.5)
                                  : 0;
      char line[160];
      std::snprintf(line, sizeof(line), "%6lld %8lld %9.1f %+7.4f  %s\n",
                    static_cast<long long>(e),
                    static_cast<long long>(seen.last.expert_counts[k]), avg,
                    bias, std::string(bar, '#').c_str());
      t << line;
      json += std::string(e ? "," : "") + "{\"expert\":" + std::to_string(e)
              + ",\"tokens\":" + std::to_string(seen.last.expert_counts[k])
              + ",\"average\":" + fixed(avg, 3) + ",\"bias\":" + fixed(bias, 6)
              + "}";
    }
    json += "]}";
  }
  return {true, t.str(), json + "]"};
}

shell_reply metrics_reply(const coordinator_state& st,
                          const std::string& name) {
  std::istringstream in(render_metrics(st));
  std::string line, text;
  while (std::getline(in, line))
    if (name.empty() || line.find(name) != std::string::npos)
      text += line + "\n";
  if (text.empty())
    return refuse("metrics: no metric matches '" + name
                  + "' (try metrics without a name)");
  return {true, text, quoted(text)};
}

shell_reply lines_reply(const std::vector<std::string>& lines) {
  std::string text, json = "[";
  for (size_t i = 0; i < lines.size(); ++i) {
    text += lines[i] + "\n";
    json += (i ? "," : "") + quoted(lines[i]);
  }
  return {true, text, json + "]"};
}

// Sends `msg` to every connected node and answers once they all replied.
template <class Reply, class Combine, class... Ts>
caf::result<shell_reply> ask_nodes(coordinator_pointer self,
                                   std::vector<int64_t> nodes,
                                   Combine combine, Ts... xs) {
  struct gather {
    std::vector<Reply> replies;
    size_t pending = 0;
    caf::typed_response_promise<shell_reply> promise;
  };
  auto g = std::make_shared<gather>();
  g->promise = self->make_response_promise<shell_reply>();
  g->pending = nodes.size();
  if (nodes.empty())
    return combine(g->replies);
  for (auto n : nodes) {
    auto i = self->state.nodes.find(n);
    self->request(i->second.supervisor, std::chrono::seconds(3), xs...)
      .then(
        [g, combine](Reply& r) {
          g->replies.push_back(std::move(r));
          if (--g->pending == 0)
            g->promise.deliver(combine(g->replies));
        },
        [g, combine](caf::error&) {
          if (--g->pending == 0)
            g->promise.deliver(combine(g->replies));
        });
  }
  return g->promise;
}

std::vector<int64_t> connected(const coordinator_state& st) {
  std::vector<int64_t> out;
  for (const auto& [n, m] : st.nodes)
    out.push_back(n);
  return out;
}

caf::result<shell_reply> actors_reply(coordinator_pointer self,
                                      const std::string& prefix) {
  auto combine = [prefix](std::vector<std::vector<actor_info>>& all) {
    std::vector<actor_info> rows{{"coordinator", "coordinator", "running", 0,
                                  -1}};
    for (auto& part : all)
      rows.insert(rows.end(), part.begin(), part.end());
    std::string text =
      "path                                kind               state     "
      "restarts  mailbox\n";
    std::string json = "[";
    size_t shown = 0;
    for (const auto& r : rows) {
      if (!prefix.empty() && r.path.rfind(prefix, 0) != 0)
        continue;
      char line[256];
      std::snprintf(line, sizeof(line), "%-35s %-18s %-9s %8lld  %7s\n",
                    r.path.c_str(), r.kind.c_str(), r.state.c_str(),
                    static_cast<long long>(r.restarts),
                    r.mailbox < 0 ? "-" : std::to_string(r.mailbox).c_str());
      text += line;
      json += std::string(shown++ ? "," : "") + "{\"path\":" + quoted(r.path)
              + ",\"kind\":" + quoted(r.kind) + ",\"state\":"
              + quoted(r.state) + ",\"restarts\":"
              + std::to_string(r.restarts)
              + ",\"mailbox\":" + std::to_string(r.mailbox) + "}";
    }
    if (shown == 0)
      return refuse("actors: no actor under '" + prefix
                    + "' (try actors to list them all)");
    return shell_reply{true, text, json + "]"};
  };
  return ask_nodes<std::vector<actor_info>>(self, connected(self->state),
                                            combine, actors_atom_v);
}

caf::result<shell_reply> logs_reply(coordinator_pointer self, int64_t node,
                                    const std::string& level,
                                    int64_t max_lines) {
  auto nodes = connected(self->state);
  if (node >= 0) {
    if (!self->state.nodes.count(node))
      return refuse("logs: node " + std::to_string(node)
                    + " is not connected");
    nodes = {node};
  }
  // Merged by time: every line starts with {"time":"<ISO 8601>".
  auto combine = [max_lines](std::vector<std::vector<std::string>>& all) {
    std::vector<std::string> lines;
    for (auto& part : all)
      lines.insert(lines.end(), part.begin(), part.end());
    std::stable_sort(lines.begin(), lines.end());
    if (max_lines > 0 && static_cast<int64_t>(lines.size()) > max_lines)
      lines.erase(lines.begin(), lines.end() - max_lines);
    return lines_reply(lines);
  };
  return ask_nodes<std::vector<std::string>>(self, nodes, combine,
                                             log_query{level, max_lines});
}

caf::result<shell_reply> exit_reply(coordinator_pointer self,
                                    const std::string& path, bool kill) {
  int64_t node = -1;
  if (path.rfind("node", 0) == 0)
    parse_int(path.substr(4, path.find('/') - 4), node);
  auto i = self->state.nodes.find(node);
  if (i == self->state.nodes.end() || path.find('/') == std::string::npos)
    return refuse(std::string(kill ? "kill" : "restart") + ": no actor '"
                  + path + "' (paths look like node1/expert_shard/2; try "
                           "actors)");
  record_event(self, kill ? "chaos" : "operator",
               std::string(kill ? "kill " : "restart ") + path, -1);
  auto promise = self->make_response_promise<shell_reply>();
  self
    ->request(i->second.supervisor, std::chrono::seconds(5),
              actor_exit_atom_v, path, kill)
    .then(
      [promise](std::string& done) mutable {
        promise.deliver(shell_reply{true, done + "\n", quoted(done)});
      },
      [self, promise](caf::error& err) mutable {
        promise.deliver(refuse(self->system().render(err)));
      });
  return promise;
}

// pause | resume | checkpoint: to every rank, at the next step boundary.
shell_reply operator_request(coordinator_pointer self,
                             const std::string& what) {
  auto& st = self->state;
  if (st.state != job_state::running)
    return refuse(what + ": the job is " + describe_job(st).state);
  if (what == "pause" && st.user_paused)
    return refuse("pause: the job is paused already");
  if (what == "resume" && !st.user_paused)
    return refuse("resume: the job is not paused");
  if (what != "checkpoint")
    st.user_paused = what == "pause";
  for (auto& [n, m] : st.nodes) {
    if (what == "pause")
      self->send(m.supervisor, pause_atom_v);
    else if (what == "resume")
      self->send(m.supervisor, resume_atom_v);
    else
      self->send(m.supervisor, checkpoint_now_atom_v);
  }
  record_event(self, "operator", what, -1);
  log_info("coordinator", "operator: " + what);
  auto text = what == "pause"    ? "pausing after the next step"
              : what == "resume" ? "resuming"
                                 : "checkpoint after the next step";
  return {true, std::string(text) + "\n", quoted(text)};
}

} // namespace

caf::result<shell_reply> run_shell_command(coordinator_pointer self,
                                           const std::string& command,
                                           const std::vector<std::string>& args) {
  auto& st = self->state;
  auto arg = [&](size_t i) { return i < args.size() ? args[i] : ""; };
  if (command == "status")
    return status_reply(st);
  if (command == "nodes")
    return nodes_reply(st);
  if (command == "actors")
    return actors_reply(self, arg(0));
  if (command == "experts") {
    int64_t layer = -1;
    if (!args.empty() && (!parse_int(arg(0), layer) || layer < 0))
      return refuse("experts: LAYER must be a whole number >= 0, got '"
                    + arg(0) + "'");
    return experts_reply(st, layer);
  }
  if (command == "metrics")
    return metrics_reply(st, arg(0));
  if (command == "events") {
    int64_t since_s = 0;
    if (!args.empty() && (!parse_int(arg(0), since_s) || since_s < 0))
      return refuse("events: --since must be seconds >= 0, got '" + arg(0)
                    + "'");
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    auto promise = self->make_response_promise<shell_reply>();
    self
      ->request(st.journal, std::chrono::seconds(5), events_atom_v,
                since_s > 0 ? now_ms - since_s * 1000 : int64_t{0})
      .then(
        [promise](std::vector<std::string>& lines) mutable {
          promise.deliver(lines_reply(lines));
        },
        [self, promise](caf::error& err) mutable {
          promise.deliver(refuse("events: " + self->system().render(err)));
        });
    return promise;
  }
  if (command == "logs") {
    int64_t node = -1, lines = 200;
    if (!arg(0).empty() && !parse_int(arg(0), node))
      return refuse("logs: --node must be a number, got '" + arg(0) + "'");
    if (!arg(2).empty() && (!parse_int(arg(2), lines) || lines < 1))
      return refuse("logs: --lines must be a number >= 1, got '" + arg(2)
                    + "'");
    return logs_reply(self, node, arg(1).empty() ? "info" : arg(1), lines);
  }
  if (command == "pause" || command == "resume" || command == "checkpoint")
    return operator_request(self, command);
  if (command == "restart" || command == "kill")
    return exit_reply(self, arg(0), command == "kill");
  if (command == "drain") {
    int64_t node = -1;
    if (!parse_int(arg(0), node) || !st.nodes.count(node))
      return refuse("drain: NODE must be a connected node, got '" + arg(0)
                    + "' (see nodes)");
    if (node == 0)
      return refuse("drain: node 0 hosts the coordinator and cannot leave");
    st.draining.insert(node);
    self->send(st.nodes[node].supervisor, drain_atom_v);
    record_event(self, "operator", "drain node " + std::to_string(node), -1);
    on_node_lost(self, node, "drained on request");
    auto text = "node " + std::to_string(node)
                + " drained; the job waits for a daemon with --node-rank "
                + std::to_string(node);
    return shell_reply{true, text + "\n", quoted(text)};
  }
  if (command == "stop") {
    for (auto& [n, m] : st.nodes)
      self->send(m.supervisor, stop_atom_v);
    record_event(self, "operator", "stop", -1);
    return shell_reply{true, "stopping at the next step boundary\n",
                       quoted("stopping")};
  }
  return refuse("unknown command '" + command + "' (try help)");
}

} // namespace tutti
