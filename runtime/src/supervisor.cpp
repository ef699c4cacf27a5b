#include "tutti/runtime/supervisor.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <deque>
#include <map>

#include "tutti/runtime/log.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

supervisor_flags flags_of(const supervision_spec& spec) {
  supervisor_flags f;
  f.strategy = spec.strategy;
  f.max_restarts = spec.max_restarts;
  f.period = spec.period();
  return f;
}

restart_type restart_of(const supervision_spec& spec) { return spec.restart; }

namespace {

using clock_type = std::chrono::steady_clock;

struct child {
  child_spec spec;
  caf::actor handle; // null while not running
  int64_t restarts = 0;
};

struct supervisor_state {
  supervisor_state() = default; // not an aggregate (CAF would pass `this`)
  static inline const char* name = "supervisor";
  std::string label;
  supervisor_flags flags;
  std::vector<child> children;
  caf::actor parent;
  std::deque<clock_type::time_point> recent; // restarts within the period
};

using supervisor_pointer = supervisor_actor::stateful_pointer<supervisor_state>;

void start_child(supervisor_pointer self, child& c) {
  c.handle = c.spec.start(self->system());
  self->monitor(c.handle);
}

// Stops a running child on purpose: forgetting its handle first makes its
// down message unknown, so it is not taken for a failure.
void stop_child(supervisor_pointer self, child& c) {
  if (!c.handle)
    return;
  auto h = std::move(c.handle);
  c.handle = nullptr;
  self->demonitor(h);
  self->send_exit(h, caf::exit_reason::user_shutdown);
}

void give_up(supervisor_pointer self, const std::string& why) {
  auto& st = self->state;
  for (auto i = st.children.rbegin(); i != st.children.rend(); ++i)
    stop_child(self, *i);
  log_error("supervisor", st.label + " gives up: " + why);
  if (st.parent)
    caf::anon_send(st.parent, escalate_atom_v, st.label + ": " + why);
  self->quit(caf::make_error(errc::rank_failed, st.label + ": " + why));
}

// True when one more restart stays within max_restarts per period.
bool may_restart(supervisor_state& st) {
  const auto now = clock_type::now();
  while (!st.recent.empty() && now - st.recent.front() > st.flags.period)
    st.recent.pop_front();
  st.recent.push_back(now);
  return static_cast<int64_t>(st.recent.size()) <= st.flags.max_restarts;
}

void on_down(supervisor_pointer self, caf::down_msg& dm) {
  auto& st = self->state;
  size_t at = st.children.size();
  for (size_t i = 0; i < st.children.size(); ++i)
    if (st.children[i].handle && st.children[i].handle.address() == dm.source)
      at = i;
  if (at == st.children.size())
    return; // a child we stopped ourselves
  auto& c = st.children[at];
  c.handle = nullptr;
  const bool abnormal = dm.reason && dm.reason != caf::exit_reason::normal;
  const bool restart = c.spec.restart == restart_type::permanent
                       || (c.spec.restart == restart_type::transient
                           && abnormal);
  const auto why = self->system().render(dm.reason);
  if (!restart) {
    log_info("supervisor", st.label + ": " + c.spec.id + " ended (" + why
                             + "), not restarted (" + to_string(c.spec.restart)
                             + ")");
    return;
  }
  if (!may_restart(st)) {
    give_up(self, "more than " + std::to_string(st.flags.max_restarts)
                    + " restarts in " + std::to_string(st.flags.period.count())
                    + " ms; last: " + c.spec.id + " (" + why + ")");
    return;
  }
  // Which children go down and come back with it, by strategy.
  size_t first = at, last = at + 1;
  if (st.flags.strategy == restart_strategy::rest_for_one)
    last = st.children.size();
  if (st.flags.strategy == restart_strategy::one_for_all) {
    first = 0;
    last = st.children.size();
  }
  for (size_t i = last; i-- > first;)
    if (i != at)
      stop_child(self, st.children[i]);
  for (size_t i = first; i < last; ++i) {
    auto& r = st.children[i];
    if (i != at && r.spec.restart == restart_type::temporary)
      continue; // stopped with the others; temporary children stay down
    start_child(self, r);
    ++r.restarts;
  }
  log_warn("supervisor", st.label + ": restarted " + c.spec.id + " after " + why
                           + " (" + to_string(st.flags.strategy) + ", restart "
                           + std::to_string(c.restarts) + ")");
  if (st.parent)
    caf::anon_send(st.parent, child_restarted{c.spec.id, why});
}

supervisor_actor::behavior_type supervisor(supervisor_pointer self,
                                           std::string label,
                                           supervisor_flags flags,
                                           std::vector<child_spec> specs,
                                           caf::actor parent) {
  auto& st = self->state;
  st.label = std::move(label);
  st.flags = flags;
  st.parent = std::move(parent);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  for (auto& spec : specs)
    st.children.push_back({std::move(spec), nullptr, 0});
  for (auto& c : st.children)
    start_child(self, c);
  return {
    [self](children_atom) {
      std::vector<child_status> out;
      for (const auto& c : self->state.children)
        out.push_back({c.spec.id, static_cast<bool>(c.handle), c.restarts});
      return out;
    },
    [self](which_child_atom, const std::string& id) -> caf::result<caf::actor> {
      for (const auto& c : self->state.children)
        if (c.spec.id == id && c.handle)
          return c.handle;
      return caf::make_error(errc::expert_failed,
                             self->state.label + ": no running child " + id);
    },
    [self](stop_atom) {
      auto& st = self->state;
      for (auto i = st.children.rbegin(); i != st.children.rend(); ++i)
        stop_child(self, *i);
      self->quit();
    },
  };
}

} // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys, std::string name,
                                  supervisor_flags flags,
                                  std::vector<child_spec> children,
                                  caf::actor parent) {
  return sys.spawn(supervisor, std::move(name), flags, std::move(children),
                   std::move(parent));
}

} // namespace tutti
