// The shell's commands, answered by the coordinator (tutti shell connects
// to it, directly or through any daemon). Each answer is data
// (protocol/shell_messages.hpp) that the client renders as text or JSON; a
// refused command is ok = false with one line saying why.

#include <caf/send.hpp>
#include "tutti/base/whole_number.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "coordinator/coordinator_state.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/security/audit_log.hpp"

namespace tutti {

namespace {

shell_reply refuse(const std::string& why) {
  shell_reply r;
  r.ok = false;
  r.error = why;
  return r;
}

// The answer of a command that acts: what happens now, in one line.
shell_reply said(std::string message) {
  shell_reply r;
  r.message = std::move(message);
  return r;
}

bool parse_int(const std::string& text, int64_t& out) {
  const auto value = whole_number(text);
  if (value)
    out = *value;
  return value.has_value();
}

shell_reply status_reply(const coordinator_state& st) {
  shell_reply r;
  auto& v = r.status;
  v.job = describe_job(st);
  v.nnodes = st.cfg.cluster.nnodes;
  const auto& seen = st.seen;
  v.tokens_per_s = seen.have_last && seen.last.step_time_s > 0
                     ? seen.last.tokens / seen.last.step_time_s
                     : 0;
  const double per_step = seen.steps_seen > 0 ? seen.elapsed_s / seen.steps_seen
                                              : 0;
  v.eta_s = per_step * static_cast<double>(v.job.steps - v.job.step);
  if (seen.have_last) {
    v.alltoall_bytes_by_link = seen.last.alltoall_bytes_by_link;
    v.tokens = seen.last.tokens;
  }
  return r;
}

shell_reply nodes_reply(const coordinator_state& st) {
  shell_reply r;
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
    // Under a smaller layout a node's ranks follow its index in it; a
    // node it has no room for is "idle".
    const auto index = st.epoch_index(n);
    r.nodes.push_back({n, a.host + ":" + std::to_string(a.port), a.rack,
                       index < 0 ? -1 : index * per, per, age,
                       st.draining.count(n) ? "drained"
                       : !up                ? "lost"
                       : index < 0          ? "idle"
                                            : "up"});
  }
  return r;
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
  shell_reply r;
  const int64_t first = layer < 0 ? 0 : layer;
  const int64_t last = layer < 0 ? layers : layer + 1;
  for (int64_t l = first; l < last; ++l) {
    double sum_last = 0, max_last = 0;
    layer_load load{
      l, seen.last.step, 0, seen.last.dropped_tokens, seen.dropped_total, {}};
    for (int64_t e = 0; e < experts; ++e) {
      const auto k = static_cast<size_t>(l * experts + e);
      const auto tokens = seen.last.expert_counts[k];
      sum_last += static_cast<double>(tokens);
      max_last = std::max(max_last, static_cast<double>(tokens));
      load.experts.push_back(
        {e, tokens, seen.expert_sum[k] / seen.expert_steps,
         k < seen.last.router_bias.size() ? seen.last.router_bias[k] : 0});
    }
    load.max_over_mean = sum_last > 0 ? max_last / (sum_last / experts) : 0;
    r.experts.push_back(std::move(load));
  }
  return r;
}

shell_reply metrics_reply(const coordinator_state& st,
                          const std::string& name) {
  std::istringstream in(render_metrics(st));
  std::string line;
  shell_reply r;
  while (std::getline(in, line))
    if (name.empty() || line.find(name) != std::string::npos)
      r.lines.push_back(line);
  if (r.lines.empty())
    return refuse("metrics: no metric matches '" + name
                  + "' (try metrics without a name)");
  return r;
}

shell_reply lines_reply(std::vector<std::string> lines) {
  shell_reply r;
  r.lines = std::move(lines);
  return r;
}

// Sends `msg` to every connected node and answers once they all replied.
template <class Reply, class Combine, class... Ts>
caf::result<shell_reply> ask_nodes(coordinator_pointer self,
                                   std::vector<int64_t> nodes, Combine combine,
                                   Ts... xs) {
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
    std::vector<actor_info> rows{
      {"coordinator", "coordinator", "running", 0, -1}};
    for (auto& part : all)
      rows.insert(rows.end(), part.begin(), part.end());
    shell_reply r;
    for (auto& row : rows)
      if (prefix.empty() || row.path.rfind(prefix, 0) == 0)
        r.actors.push_back(std::move(row));
    if (r.actors.empty())
      return refuse("actors: no actor under '" + prefix
                    + "' (try actors to list them all)");
    return r;
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
      return refuse("logs: node " + std::to_string(node) + " is not connected");
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
    return refuse(std::string(kill ? "kill" : "restart") + ": no actor '" + path
                  + "' (paths look like node1/expert_shard/2; try "
                    "actors)");
  record_event(self, kill ? "chaos" : "operator",
               std::string(kill ? "kill " : "restart ") + path, -1);
  auto promise = self->make_response_promise<shell_reply>();
  self
    ->request(i->second.supervisor, std::chrono::seconds(5), actor_exit_atom_v,
              path, kill)
    .then([promise](std::string& done) mutable { promise.deliver(said(done)); },
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
  return said(text);
}

} // namespace

caf::result<shell_reply> run_shell_command(
  coordinator_pointer self, const std::string& command,
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
      return refuse("experts: LAYER must be a whole number >= 0, got '" + arg(0)
                    + "'");
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
                + (st.assigned.count(node)
                     ? " drained; a waiting spare takes its place (see the "
                       "reschedule event)"
                     : " drained; the job waits for a daemon with --node-rank "
                         + std::to_string(node) + " or a spare (tuttid --spare)");
    return said(text);
  }
  if (command == "stop") {
    for (auto& [n, m] : st.nodes)
      self->send(m.supervisor, stop_atom_v);
    record_event(self, "operator", "stop", -1);
    return said("stopping at the next step boundary");
  }
  if (command == "config") {
    auto promise = self->make_response_promise<shell_reply>();
    self->request(st.journal, std::chrono::seconds(10), config_atom_v, args)
      .then(
        [promise](std::vector<std::string>& lines) mutable {
          // One message: rendered as it is, text or JSON.
          std::string text;
          for (const auto& line : lines)
            text += (text.empty() ? "" : "\n") + line;
          promise.deliver(said(text));
        },
        [self, promise](caf::error& err) mutable {
          promise.deliver(refuse("config: " + self->system().render(err)));
        });
    return promise;
  }
  if (command == "rollback") {
    // The job's store and checkpoints are in use while it runs: a rollback
    // moves checkpoints aside and records a new version, so it is done on
    // the stopped job (tutti rollback, or the shell's rollback RUN_DIR).
    const std::string to = "rollback " + st.cfg.run.dir + " --to-version "
                           + (arg(0).empty() ? "V" : arg(0))
                           + (arg(1).empty() ? "" : " --checkpoint " + arg(1));
    if (st.ended())
      return refuse("rollback: the job is " + describe_job(st).state
                    + " but its process still holds the store; once it has "
                      "exited, "
                    + to + " restarts it on that version");
    return refuse("rollback: the job is " + describe_job(st).state
                  + "; stop it first (stop), then " + to
                  + " restarts it on that version");
  }
  if (command == "audit") {
    // Small and local (RUN_DIR/audit.jsonl, appended by the audit writer).
    auto records = security::read_audit_log(st.cfg.run.dir + "/audit.jsonl");
    if (!records)
      return refuse("audit: " + records.message());
    std::vector<std::string> lines;
    for (const auto& r : *records)
      lines.push_back(std::to_string(r.seq) + " " + r.time + " " + r.user + " ("
                      + (r.role.empty() ? "-" : r.role) + ") from " + r.source
                      + ": " + r.command
                      + (r.target.empty() ? "" : " " + r.target) + " -> "
                      + r.decision + ": " + r.result);
    return lines_reply(lines);
  }
  return refuse("unknown command '" + command + "' (try help)");
}

} // namespace tutti
