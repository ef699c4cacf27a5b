#include "shard/expert_shard.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "tutti/runtime/log.hpp"
#include "tutti/train/rank.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/expert_ffn.hpp"
#include "tutti/train/tensor_parallel.hpp"
#include "tutti/base/core_pinning.hpp"
#include "tutti/train/idle_core_pool.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/train/stage_layout.hpp"
#include "tutti/protocol/errors.hpp"
#include "tutti/store/expert_blocks.hpp"

namespace tutti {

namespace k = tutti::kernels;

namespace {

struct expert_shard_state {
  expert_shard_state() = default; // not an aggregate (CAF would pass `this`)
  static inline const char* name = "expert_shard";

  job_config cfg;
  int32_t rank = 0;
  int64_t first_expert = 0; // of the contiguous layout, for the checkpoint
  int64_t count = 0;
  train::stage_layers layers; // its pipeline stage's
  std::vector<int32_t> expert_ids; // [layer][row], every layer's
  model::param_layout layout;
  std::shared_ptr<expert_shard_memory> mem;
  std::unique_ptr<train::expert_ffn> ffn;
  // Its own stream on its rank's GPU (the rank waits for its own work
  // before asking, the shard for its own before answering), or the CPU.
  std::unique_ptr<k::device_stream> device_stream;
  k::stream stream;
  std::string fault; // injected, fires on the next forward

  train::expert_block block(int64_t layer) {
    auto at = [&](const char* which) {
      return layout.at(model::expert_block_name(layer, which)).offset;
    };
    auto& p = mem->params;
    auto& g = mem->grads;
    return {p.data() + at("w1"), p.data() + at("w3"), p.data() + at("w2"),
            g.data() + at("w1"), g.data() + at("w3"), g.data() + at("w2")};
  }

  // One AdamW step of every tensor into the second set, which then
  // becomes the live one; a failure before the swap leaves the live set as
  // it was at the step's start. Without restart in place there is no
  // second set: the step is taken in place.
  void optimize(const optimizer_args& a) {
    const auto& t = cfg.train;
    const train::adamw_step_args step{a.lr,  t.beta1,        t.beta2,
                                      t.eps, t.weight_decay, a.step,
                                      a.grad_scale};
    if (!cfg.expert_restart_in_place()) {
      for (const auto& spec : layout.tensors())
        mem->moments.step(stream, mem->params.data() + spec.offset,
                          mem->grads.data() + spec.offset, spec.offset,
                          spec.numel, step);
      k::wait(stream);
      mem->optimized_step = a.step;
      return;
    }
    const size_t n = layout.total();
    mem->next_params.resize(stream, n);
    if (mem->next_moments.size() != n)
      mem->next_moments.zeros(stream, n, cfg.train.precision.moments);
    for (const auto& spec : layout.tensors())
      mem->moments.step_into(stream, mem->params.data() + spec.offset,
                             mem->grads.data() + spec.offset,
                             mem->next_params.data() + spec.offset,
                             mem->next_moments, spec.offset, spec.numel,
                             step);
    k::wait(stream);
    std::swap(mem->params, mem->next_params);
    mem->moments.swap(mem->next_moments);
    mem->optimized_step = a.step;
  }
};

using shard_pointer = expert_shard_actor::stateful_pointer<expert_shard_state>;

// The NaN/Inf guard: a shard that produced a non-finite value fails, and
// its supervisor restarts it (a one-off fault then passes on the replay; a
// persistent one exceeds the restart intensity and escalates).
void require_finite(const k::stream& s, const float* x, int64_t n,
                    const char* what, int64_t layer) {
  if (!k::all_finite(s, x, n))
    throw std::runtime_error(std::string("non-finite value in the ") + what
                             + " of layer " + std::to_string(layer));
}

// A failed unit of work ends the shard with the reason (the requester gets
// the error at once, the supervisor the down message). Kernels already
// queued may still write into the rank's buffers: drain the stream first.
caf::error shard_failed(shard_pointer self, const std::exception& ex) {
  try {
    k::wait(self->state.stream);
  } catch (const std::exception&) {
    // The device itself failed: nothing more to drain.
  }
  auto err = caf::make_error(errc::expert_failed,
                             "expert shard of rank "
                               + std::to_string(self->state.rank) + ": "
                               + ex.what());
  self->quit(err);
  return err;
}

// Runs `work` to completion on the shard's stream and records how long it
// took in the task: the rank's measure of what its sends overlapped.
template <class F>
void timed(expert_shard_state& st, expert_task& task, F&& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  k::wait(st.stream);
  task.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                               - t0)
                   .count();
}

// Runs one unit of work to completion (the rank reads the results next).
template <class F>
caf::result<caf::ok_atom> guarded(shard_pointer self, F&& work) {
  try {
    work();
    k::wait(self->state.stream);
    return caf::ok_atom_v;
  } catch (const std::exception& ex) {
    return shard_failed(self, ex);
  }
}

void initialize(expert_shard_state& st) {
  const auto& c = st.cfg;
  auto& mem = *st.mem;
  if (!mem.initialized) {
    // Whole experts, then this TP rank's slice of their intermediate
    // dimension: every layout starts from the same weights.
    const auto full = train::expert_layout_of_layers(c.model, st.count, st.layers);
    std::vector<float> init(full.total());
    model::init_expert_params(full, init.data(), c.model, st.expert_ids,
                              st.count, c.train.seed, c.model.init_std);
    if (c.tp_size() > 1)
      init = train::take_tp_parts(full, init.data(), c.tp_size(),
                                  c.tp_rank_of(st.rank));
    mem.expert_ids = st.expert_ids;
    mem.params.upload(st.stream, init);
    mem.grads.zeros(st.stream, st.layout.total());
    mem.moments.zeros(st.stream, st.layout.total(),
                      c.train.precision.moments);
    k::wait(st.stream);
    mem.initialized = true;
    return;
  }
  // A restart: the live set is the state at the start of the step (only
  // a completed optimizer step changes it). Gradients stay: the rank
  // decides whether to replay them (shard_executor).
  st.expert_ids = mem.expert_ids;
  log_warn("expert_shard", "rank " + std::to_string(st.rank)
                             + ": expert shard restarted from its "
                               "state at the start of step "
                             + std::to_string(mem.optimized_step + 1));
}

// The shard's tensors, copied to the host, for a checkpoint.
rank_snapshot_ptr take_snapshot(expert_shard_state& st, int64_t step) {
  auto snap = std::make_shared<rank_snapshot>();
  snap->step = step;
  snap->ints["first_expert"] = st.first_expert;
  snap->ints["expert_count"] = st.count;
  // Under a placement the blocks hold any experts: name each row.
  std::vector<std::vector<int64_t>> ids(st.cfg.model.num_hidden_layers);
  for (size_t l = 0; l < ids.size(); ++l)
    ids[l].assign(st.expert_ids.begin() + std::ptrdiff_t(l * st.count),
                  st.expert_ids.begin() + std::ptrdiff_t((l + 1) * st.count));
  snap->strings["expert_ids"] = store::block_experts_text(ids);
  for (const auto& spec : st.layout.tensors()) {
    std::vector<float> params(spec.numel), m(spec.numel), v(spec.numel);
    st.mem->params.download(st.stream, params.data(), spec.numel, spec.offset);
    st.mem->moments.download(st.stream, m.data(), v.data(), spec.numel,
                             spec.offset);
    snap->tensors.push_back({spec.name, spec.shape, std::move(params)});
    snap->tensors.push_back({"adam_m/" + spec.name, spec.shape, std::move(m)});
    snap->tensors.push_back({"adam_v/" + spec.name, spec.shape, std::move(v)});
  }
  return snap;
}

caf::result<caf::ok_atom> restore(expert_shard_state& st,
                                  const rank_snapshot& snap) {
  auto find = [&](const std::string& name) -> const owned_tensor* {
    for (const auto& t : snap.tensors)
      if (t.name == name)
        return &t;
    return nullptr;
  };
  for (const auto& spec : st.layout.tensors()) {
    const owned_tensor* found[3] = {};
    int i = 0;
    for (const char* prefix : {"", "adam_m/", "adam_v/"}) {
      auto* t = find(prefix + spec.name);
      if (!t || static_cast<int64_t>(t->data.size()) != spec.numel)
        return caf::make_error(errc::expert_failed,
                               "checkpoint lacks " + std::string(prefix)
                                 + spec.name
                                 + " for the experts of rank "
                                 + std::to_string(st.rank));
      found[i++] = t;
    }
    st.mem->params.upload(st.stream, found[0]->data.data(), spec.numel,
                          spec.offset);
    st.mem->moments.upload(st.stream, found[1]->data.data(),
                           found[2]->data.data(), spec.numel, spec.offset);
  }
  k::wait(st.stream);
  st.mem->optimized_step = snap.step;
  return caf::ok_atom_v;
}

expert_shard_actor::behavior_type expert_shard(shard_pointer self,
                                               expert_shard_args args) {
  k::use_single_threaded_blas();
  auto& st = self->state;
  st.cfg = std::move(args.cfg);
  if (args.device < 0 && st.cfg.cluster.pin_rank_cores)
    pin_to_rank_core(args.local_rank, args.ranks_in_process); // its rank's
  st.rank = args.rank;
  st.mem = std::move(args.memory);
  if (args.device >= 0) {
    k::cuda_set_device(args.device); // this thread's device, for good
    st.device_stream = std::make_unique<k::device_stream>(
      gemm_precision_of(st.cfg));
    st.stream = st.device_stream->get();
  } else {
    st.stream.gemm = gemm_precision_of(st.cfg); // the CPU's bf16 GEMMs
  }
  const auto& c = st.cfg;
  st.count = c.experts_per_rank();
  st.first_expert = c.ep_member_of(args.rank) * st.count;
  st.expert_ids = std::move(args.expert_ids);
  if (st.expert_ids.empty())
    for (int64_t l = 0; l < c.model.num_hidden_layers; ++l)
      for (int64_t j = 0; j < st.count; ++j)
        st.expert_ids.push_back(static_cast<int32_t>(st.first_expert + j));
  // Its pipeline stage's layers only (all of them without PP).
  st.layers = train::layers_of_stage(c, c.pp_stage_of(args.rank));
  st.layout = train::tp_local_layout(
    train::expert_layout_of_layers(c.model, st.count, st.layers), c.tp_size());
  initialize(st);
  st.ffn = std::make_unique<train::expert_ffn>(c.model.num_hidden_layers,
                                               st.count, c.model.hidden_size,
                                               c.model.intermediate_size
                                                 / c.tp_size());
  st.ffn->split_into_tiles(train::expert_tiles_for(c, args.device));
  if (train::shares_expert_tiles(c, args.device)) {
    // A CPU shard's tiles may run on the cores of the process's waiting
    // ranks (idle_core_pool.hpp).
    auto& pool = train::idle_core_pool::process();
    pool.join();
    self->attach_functor([&pool] { pool.leave(); });
    st.ffn->share_idle_cores(true);
    log_info("expert_shard", "rank " + std::to_string(st.rank)
                               + ": experts' tiles shared with the waiting "
                                 "ranks of the process (shards: "
                               + std::to_string(pool.members()) + ")");
  }
  return {
    [self](expert_fwd_atom, expert_task_ptr task) {
      return guarded(self, [&] {
        auto& st = self->state;
        // raise_expert waits for a layer's last chunk: with chunks, the
        // request the rank has in flight while it sends the one before.
        if (st.fault == "raise_expert" && task->last_chunk) {
          st.fault.clear();
          throw std::runtime_error("injected fault (raise_expert)");
        }
        auto fault = st.fault == "raise_expert"
                       ? std::string()
                       : std::exchange(st.fault, std::string());
        timed(st, *task, [&] {
          st.ffn->use_slot(task->slot);
          st.ffn->forward(st.stream, task->layer, st.block(task->layer),
                          task->input, task->rows_per_expert, task->output,
                          task->append);
        });
        const auto n = task->rows * st.cfg.model.hidden_size;
        if (fault == "nan_expert" && n > 0) {
          const float nan = std::numeric_limits<float>::quiet_NaN();
          k::upload(st.stream, task->output, &nan, sizeof nan);
        }
        require_finite(st.stream, task->output, n, "expert output",
                       task->layer);
      });
    },
    [self](expert_bwd_atom, expert_task_ptr task) {
      return guarded(self, [&] {
        auto& st = self->state;
        timed(st, *task, [&] {
          st.ffn->use_slot(task->slot);
          st.ffn->backward(st.stream, task->layer, st.block(task->layer),
                           task->input, task->output, task->rows_per_expert,
                           task->first_row);
        });
        require_finite(st.stream, task->output,
                       task->rows * st.cfg.model.hidden_size, "input gradient",
                       task->layer);
      });
    },
    [self](zero_grads_atom) {
      return guarded(self, [&] {
        auto& st = self->state;
        st.mem->grads.zeros(st.stream, st.mem->grads.size());
      });
    },
    [self](mailbox_atom) -> int64_t {
      return static_cast<int64_t>(self->mailbox().size());
    },
    [self](chaos_atom, const std::string& fault) { self->state.fault = fault; },
    [self](grads_atom) -> grad_view {
      auto& g = self->state.mem->grads;
      return {g.data(), static_cast<int64_t>(g.size())};
    },
    [self](snapshot_atom, int64_t step) -> caf::result<rank_snapshot_ptr> {
      try {
        return take_snapshot(self->state, step);
      } catch (const std::exception& ex) {
        return shard_failed(self, ex);
      }
    },
    [self](restore_atom, rank_snapshot_ptr snap) -> caf::result<caf::ok_atom> {
      try {
        return restore(self->state, *snap);
      } catch (const std::exception& ex) {
        return shard_failed(self, ex);
      }
    },
    [self](optimize_atom, optimizer_args a) {
      return guarded(self, [&] {
        auto& st = self->state;
        auto& mem = *st.mem;
        if (mem.optimized_step >= a.step)
          return; // done before a restart; the retry must not apply it twice
        st.optimize(a);
        mem.grads.zeros(st.stream, mem.grads.size());
      });
    },
  };
}

} // namespace

expert_shard_actor spawn_expert_shard(caf::actor_system& sys,
                                      expert_shard_args args) {
  if (!args.memory)
    args.memory = std::make_shared<expert_shard_memory>();
  return sys.spawn<caf::detached>(expert_shard, std::move(args));
}

} // namespace tutti
