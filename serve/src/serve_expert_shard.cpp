// The serving expert shard: the training shard's interface (expert_fwd on
// an expert_task of rows grouped by local expert, the experts its layout
// puts on its rank in layout order), computed with the
// batch-invariant expert of the one-rank engine, so a row's output has the
// same bits whichever rank computes it and whatever else is in the task.
// A failure ends the shard with the reason; its supervisor restarts it and
// the rank resends the task (ep_rank.cpp).

#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <stdexcept>

#include "ep_actors.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/protocol/errors.hpp"
#include "tutti/kernels/invariant_ops.hpp"

namespace tutti::serve {

namespace {

struct serve_shard_state {
  serve_shard_state() = default; // not an aggregate (CAF would pass `this`)
  static inline const char* name = "serve_expert_shard";
  serve_shard_args args;
  // Injected (chaos): fires on the `fault_in`-th task with rows from now.
  std::string fault;
  int64_t fault_in = 0;
  std::vector<float> ab, h;
};

using shard_pointer = expert_shard_actor::stateful_pointer<serve_shard_state>;

caf::error failed(shard_pointer self, const std::string& why) {
  auto err = caf::make_error(errc::expert_failed,
                             "serving expert shard of rank "
                               + std::to_string(self->state.args.rank) + ": "
                               + why);
  self->quit(err);
  return err;
}

caf::error training_only(const char* what) {
  return caf::make_error(errc::expert_failed,
                         std::string("a serving expert shard does not ")
                           + what);
}

expert_shard_actor::behavior_type serve_expert_shard(shard_pointer self,
                                                     serve_shard_args args) {
  auto& st = self->state;
  st.args = args;
  // A group of one: its rank runs the tasks itself while this shard is up
  // (its id here) and no fault is armed (ep_rank.cpp).
  if (auto presence = args.presence) {
    const uint64_t id = self->id();
    presence->running = id;
    presence->fault_armed = false;
    self->attach_functor([presence, id] {
      uint64_t up = id;
      presence->running.compare_exchange_strong(up, 0);
    });
  }
  return {
    [self](expert_fwd_atom, expert_task_ptr task) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      try {
        if (!st.fault.empty() && task->rows > 0 && --st.fault_in == 0) {
          const auto fault = std::exchange(st.fault, std::string());
          throw std::runtime_error("injected fault (" + fault + ")");
        }
        compute_shard_task(st.args, *task, st.ab, st.h);
        return caf::ok_atom_v;
      } catch (const std::exception& ex) {
        return failed(self, ex.what());
      }
    },
    [](expert_bwd_atom, expert_task_ptr) -> caf::result<caf::ok_atom> {
      return training_only("run backward passes");
    },
    [](grads_atom) -> caf::result<grad_view> {
      return training_only("hold gradients");
    },
    [](optimize_atom, optimizer_args) -> caf::result<caf::ok_atom> {
      return training_only("optimize");
    },
    [](snapshot_atom, int64_t) -> caf::result<rank_snapshot_ptr> {
      return training_only("take checkpoints");
    },
    [](restore_atom, rank_snapshot_ptr) -> caf::result<caf::ok_atom> {
      return training_only("restore checkpoints");
    },
    [](zero_grads_atom) -> caf::result<caf::ok_atom> {
      return training_only("hold gradients");
    },
    // "raise_expert": fail on the next task; "raise_expert@N": on the N-th.
    [self](chaos_atom, const std::string& fault) {
      auto& st = self->state;
      const auto at = fault.find('@');
      st.fault = fault.substr(0, at);
      st.fault_in = 1;
      if (at != std::string::npos) {
        try {
          st.fault_in = std::max<int64_t>(1, std::stoll(fault.substr(at + 1)));
        } catch (const std::exception&) {
          st.fault.clear();
        }
      }
      // Tasks now come through this shard, so that it counts them.
      if (st.args.presence)
        st.args.presence->fault_armed = !st.fault.empty();
      log_warn("serve_expert_shard",
               "rank " + std::to_string(st.args.rank) + ": fault '" + st.fault
                 + "' armed for task " + std::to_string(st.fault_in));
    },
    [self](mailbox_atom) -> int64_t {
      return static_cast<int64_t>(self->mailbox().size());
    },
  };
}

} // namespace

void compute_shard_task(const serve_shard_args& args, expert_task& task,
                        std::vector<float>& ab, std::vector<float>& h) {
  const auto& s = args.model->shape;
  const auto& w = args.model->layers.at(task.layer);
  const auto layout = args.layout->get();
  const auto& x = *layout;
  const int64_t D = s.hidden;
  const int64_t first = x.begin(task.layer, args.rank);
  const int64_t count = x.end(task.layer, args.rank) - first;
  int64_t row = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t m = task.rows_per_expert[i];
    if (m == 0)
      continue;
    const int64_t e = x.expert_at(task.layer, first + i);
    if (w.w13_t[e].out == 0) // a daemon holding only its own experts
      throw std::runtime_error("expert " + std::to_string(e) + " of layer "
                               + std::to_string(task.layer)
                               + " is not loaded on this daemon");
    kernels::invariant_expert(task.input + row * D, w.w13_t[e], w.w2_t[e],
                              task.output + row * D, m, ab, h);
    row += m;
  }
}

expert_shard_actor spawn_serve_expert_shard(caf::actor_system& sys,
                                            serve_shard_args args) {
  return sys.spawn<caf::detached>(serve_expert_shard, args);
}

} // namespace tutti::serve
