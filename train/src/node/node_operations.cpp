// What the shell and tutti chaos ask of a node: its actors, its log, faults,
// operator requests to its ranks (pause, resume, checkpoint), restarting or
// killing one actor, and its own /metrics.

#include <caf/send.hpp>

#include <algorithm>
#include <csignal>

#include "node/node_supervisor_state.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/observability/prometheus_text.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

// Sends `fault` to (or kills) the running child `id` of `sup`.
void hit_child(node_pointer self, const supervisor_actor& sup,
               const std::string& id, const std::string& fault) {
  self->request(sup, std::chrono::seconds(5), which_child_atom_v, id)
    .then(
      [self, fault](caf::actor& h) {
        if (fault.rfind("kill_", 0) == 0)
          self->send_exit(h, caf::exit_reason::kill);
        else
          caf::anon_send(caf::actor_cast<expert_shard_actor>(h), chaos_atom_v,
                         fault);
      },
      [self, id](caf::error& err) {
        log_warn("node_supervisor",
                 "chaos: no running " + id + ": " + self->system().render(err));
      });
}

} // namespace

std::string inject(node_pointer self, const chaos_request& req) {
  auto& st = self->state;
  const auto& f = req.fault;
  log_warn("node_supervisor", st.who() + ": injecting fault " + f + " (rank "
                                + std::to_string(req.rank) + ")");
  if (f == "kill_daemon") {
    // Like kill -9: no goodbye to anyone.
    std::raise(SIGKILL);
  }
  if (f == "crash_checkpoint" || f == "kill_writer") {
    if (!st.writers)
      return "error: no checkpoint writer runs yet";
    if (f == "kill_writer")
      hit_child(self, st.writers, "checkpoint_writer", f);
    else
      self
        ->request(st.writers, std::chrono::seconds(5), which_child_atom_v,
                  std::string("checkpoint_writer"))
        .then(
          [](caf::actor& h) {
            caf::anon_send(caf::actor_cast<checkpoint_writer_actor>(h),
                           chaos_atom_v, std::string("crash_checkpoint"));
          },
          [](caf::error&) {});
    return f + " on " + st.who();
  }
  const auto local = req.rank - st.first_rank();
  if (local < 0 || local >= st.args.cfg.cluster.nproc_per_node)
    return "error: rank " + std::to_string(req.rank) + " is not on " + st.who();
  const auto r = std::to_string(req.rank);
  running_rank* target = nullptr;
  for (auto& [addr, rr] : st.ranks)
    if (rr.rank == req.rank)
      target = &rr;
  if (!target)
    return "error: rank " + r + " is not running";
  if (f == "kill_expert" || f == "raise_expert" || f == "nan_expert")
    hit_child(self, st.experts, "expert_shard/" + r, f);
  else if (f == "kill_loader")
    hit_child(self, st.loaders, "data_loader/" + r, f);
  else if (f == "kill_rank")
    target->control->crash = true; // its thread takes no exit messages

  else if (f == "hang_rank")
    target->control->hang = true;
  else if (f == "slow_rank")
    target->control->slow_s = req.seconds;
  else
    return "error: unknown fault '" + f + "'";
  return f + " on rank " + r;
}

} // namespace tutti

namespace tutti {

namespace {

// The rows of one `actors` answer, filled in as replies come.
struct actor_gather {
  std::vector<actor_info> rows;
  int pending = 1; // the gathering itself, until every request is out
  caf::typed_response_promise<std::vector<actor_info>> promise;

  void done_one() {
    if (--pending > 0)
      return;
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.path < b.path; });
    promise.deliver(rows);
  }
};

// Row `at`'s mailbox size, from the actor's own answer (CAF's inbox is not
// safe to read from outside); an actor in a long step (a rank answers
// between steps) shows as busy.
void ask_mailbox(node_pointer self, std::shared_ptr<actor_gather> g, size_t at,
                 const caf::actor& h) {
  self->request(h, std::chrono::milliseconds(500), mailbox_atom_v)
    .then(
      [g, at](int64_t n) {
        g->rows[at].mailbox = n;
        g->done_one();
      },
      [g, at](caf::error&) {
        g->rows[at].state = "busy";
        g->done_one();
      });
}

void gather_supervisor(node_pointer self, std::shared_ptr<actor_gather> g,
                       const supervisor_actor& sup, const std::string& label) {
  const auto node = "node" + std::to_string(self->state.args.node_rank);
  g->rows.push_back({node + "/" + label, "supervisor", "running", 0, -1});
  ++g->pending;
  self->request(sup, std::chrono::seconds(1), children_atom_v)
    .then(
      [self, g, sup, node](std::vector<child_status>& children) {
        for (const auto& c : children) {
          const auto at = g->rows.size();
          g->rows.push_back({node + "/" + c.id, c.id.substr(0, c.id.find('/')),
                             c.running ? "running" : "down", c.restarts, -1});
          if (!c.running)
            continue;
          ++g->pending;
          self->request(sup, std::chrono::seconds(1), which_child_atom_v, c.id)
            .then([self, g, at](caf::actor& h) { ask_mailbox(self, g, at, h); },
                  [g](caf::error&) { g->done_one(); });
        }
        g->done_one();
      },
      [g](caf::error&) { g->done_one(); });
}

} // namespace

caf::result<std::vector<actor_info>> list_actors(node_pointer self) {
  auto& st = self->state;
  auto g = std::make_shared<actor_gather>();
  g->promise = self->make_response_promise<std::vector<actor_info>>();
  const auto node = "node" + std::to_string(st.args.node_rank);
  g->rows.push_back({node, "node_supervisor",
                     st.draining ? "draining" : "running", 0,
                     static_cast<int64_t>(self->mailbox().size())});
  if (st.writers)
    gather_supervisor(self, g, st.writers, "checkpoint_writers");
  if (st.loaders)
    gather_supervisor(self, g, st.loaders, "data_loaders");
  if (st.experts)
    gather_supervisor(self, g, st.experts, "expert_shards");
  for (auto& [addr, r] : st.ranks) {
    const auto at = g->rows.size();
    g->rows.push_back({node + "/rank/" + std::to_string(r.rank), "rank",
                       r.control->paused ? "paused" : "running", 0, -1});
    ++g->pending;
    ask_mailbox(self, g, at, r.handle);
  }
  g->done_one();
  return g->promise;
}

void request_from_ranks(node_pointer self, const std::string& what) {
  for (auto& [addr, r] : self->state.ranks) {
    auto& c = *r.control;
    if (what == "pause")
      c.pause_requested = true;
    else if (what == "resume")
      c.resume = true;
    else if (what == "checkpoint")
      c.checkpoint_requested = true;
  }
}

caf::result<std::string> exit_actor(node_pointer self, const std::string& path,
                                    bool kill) {
  auto& st = self->state;
  const auto prefix = "node" + std::to_string(st.args.node_rank) + "/";
  if (path.rfind(prefix, 0) != 0)
    return caf::make_error(errc::config_refused,
                           "no actor " + path + " on " + st.who());
  const auto id = path.substr(prefix.size());
  const auto kind = id.substr(0, id.find('/'));
  const supervisor_actor* sup = kind == "expert_shard"        ? &st.experts
                                : kind == "data_loader"       ? &st.loaders
                                : kind == "checkpoint_writer" ? &st.writers
                                                              : nullptr;
  if (kind == "rank") {
    if (!kill)
      return caf::make_error(
        errc::config_refused,
        "a rank restarts only with its job: `kill " + path
          + "` crashes it and the job recovers from its checkpoint");
    for (auto& [addr, r] : st.ranks)
      if (prefix + "rank/" + std::to_string(r.rank) == path) {
        r.control->crash = true;
        return std::string("killed " + path + " (the job recovers)");
      }
    return caf::make_error(errc::config_refused, "no running " + path);
  }
  if (!sup || !*sup)
    return caf::make_error(errc::config_refused,
                           "no actor " + path
                             + " (try actors to list the tree)");
  auto promise = self->make_response_promise<std::string>();
  self->request(*sup, std::chrono::seconds(2), which_child_atom_v, id)
    .then(
      [self, promise, path, kill](caf::actor& h) mutable {
        // Either way its supervisor starts it again; kill is a crash, a
        // restart a clean stop.
        self->send_exit(h, kill ? caf::exit_reason::kill
                                : caf::exit_reason::user_shutdown);
        promise.deliver(std::string(kill ? "killed " : "restarting ") + path);
      },
      [promise, path](caf::error&) mutable {
        promise.deliver(
          caf::make_error(errc::config_refused, "no running " + path));
      });
  return promise;
}

void publish_node_metrics(node_pointer self) {
  auto& st = self->state;
  if (!st.board)
    return;
  observability::prometheus_text m;
  const observability::label_list node{
    {"node", std::to_string(st.args.node_rank)}};
  m.metric("tutti_daemon_ranks_running", "gauge", "Ranks this daemon runs now.",
           node, static_cast<double>(st.ranks.size()));
  m.family("tutti_daemon_restarts_total", "counter",
           "Actors this daemon's supervisors restarted, by kind.");
  for (const char* kind :
       {"expert_shard", "data_loader", "checkpoint_writer"}) {
    auto i = st.restarts_by_kind.find(kind);
    auto labels = node;
    labels.emplace_back("kind", kind);
    m.sample("tutti_daemon_restarts_total", labels,
             i == st.restarts_by_kind.end() ? 0.0
                                            : static_cast<double>(i->second));
  }
  m.metric("tutti_daemon_coordinator_heartbeat_age_seconds", "gauge",
           "Seconds since the coordinator last answered a heartbeat.", node,
           std::chrono::duration<double>(clock_type::now() - st.last_heartbeat)
             .count());
  m.metric("tutti_daemon_resident_memory_bytes", "gauge",
           "Resident memory of this daemon.", node,
           static_cast<double>(resident_memory_bytes()));
  st.board->publish(m.str());
}

} // namespace tutti
