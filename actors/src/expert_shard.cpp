#include "tutti/actors/expert_shard.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include "tutti/kernels/ops.hpp"
#include "tutti/model/expert_ffn.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace k = tutti::kernels;

namespace {

struct expert_shard_state {
  static inline const char* name = "expert_shard";

  job_config cfg;
  int64_t first_expert = 0;
  int64_t count = 0;
  model::param_layout layout;
  std::vector<float> params, grads, m, v;
  std::unique_ptr<model::expert_ffn> ffn;
  k::stream stream;

  model::expert_block block(int64_t layer) {
    auto at = [&](const char* which) {
      return layout.at(model::expert_block_name(layer, which)).offset;
    };
    return {params.data() + at("w1"), params.data() + at("w3"),
            params.data() + at("w2"), grads.data() + at("w1"),
            grads.data() + at("w3"), grads.data() + at("w2")};
  }
};

using shard_pointer =
  expert_shard_actor::stateful_pointer<expert_shard_state>;

expert_shard_actor::behavior_type expert_shard(shard_pointer self,
                                               expert_shard_args args) {
  k::use_single_threaded_blas();
  auto& st = self->state;
  st.cfg = std::move(args.cfg);
  const auto& c = st.cfg;
  st.count = c.experts_per_rank();
  st.first_expert = (args.rank % c.ep_size()) * st.count;
  st.layout = model::expert_layout(c.model, st.first_expert, st.count);
  st.params.resize(st.layout.total());
  model::init_expert_params(st.layout, st.params.data(), c.model,
                            st.first_expert, st.count, c.train.seed,
                            c.model.init_std);
  st.grads.assign(st.layout.total(), 0.0f);
  st.m.assign(st.layout.total(), 0.0f);
  st.v.assign(st.layout.total(), 0.0f);
  st.ffn = std::make_unique<model::expert_ffn>(
    c.model.num_hidden_layers, st.count, c.model.hidden_size,
    c.model.intermediate_size);
  return {
    [self](expert_fwd_atom, expert_task_ptr task) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      st.ffn->forward(st.stream, task->layer, st.block(task->layer),
                      task->input, task->rows_per_expert, task->output);
      return caf::ok_atom_v;
    },
    [self](expert_bwd_atom, expert_task_ptr task) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      st.ffn->backward(st.stream, task->layer, st.block(task->layer),
                       task->input, task->output);
      return caf::ok_atom_v;
    },
    [self](grads_atom) -> grad_view {
      auto& st = self->state;
      return {st.grads.data(), static_cast<int64_t>(st.grads.size())};
    },
    [self](snapshot_atom, int64_t step) -> rank_snapshot_ptr {
      auto& st = self->state;
      auto snap = std::make_shared<rank_snapshot>();
      snap->step = step;
      snap->ints["first_expert"] = st.first_expert;
      snap->ints["expert_count"] = st.count;
      for (const auto& spec : st.layout.tensors()) {
        auto copy = [&](const std::string& name, const std::vector<float>& v) {
          snap->tensors.push_back(
            {name, spec.shape,
             std::vector<float>(v.begin() + spec.offset,
                                v.begin() + spec.offset + spec.numel)});
        };
        copy(spec.name, st.params);
        copy("adam_m/" + spec.name, st.m);
        copy("adam_v/" + spec.name, st.v);
      }
      return snap;
    },
    [self](restore_atom,
           rank_snapshot_ptr snap) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      auto find = [&](const std::string& name) -> const owned_tensor* {
        for (const auto& t : snap->tensors)
          if (t.name == name)
            return &t;
        return nullptr;
      };
      for (const auto& spec : st.layout.tensors())
        for (auto [prefix, target] :
             {std::pair{std::string(), &st.params},
              std::pair{std::string("adam_m/"), &st.m},
              std::pair{std::string("adam_v/"), &st.v}}) {
          auto* t = find(prefix + spec.name);
          if (!t || static_cast<int64_t>(t->data.size()) != spec.numel)
            return caf::make_error(errc::expert_failed,
                                   "checkpoint lacks " + prefix + spec.name
                                     + " for experts from "
                                     + std::to_string(st.first_expert));
          std::copy(t->data.begin(), t->data.end(),
                    target->begin() + spec.offset);
        }
      return caf::ok_atom_v;
    },
    [self](optimize_atom, optimizer_args a) -> caf::ok_atom {
      auto& st = self->state;
      const auto& t = st.cfg.train;
      for (const auto& spec : st.layout.tensors())
        k::adamw_step(st.stream, st.params.data() + spec.offset,
                      st.grads.data() + spec.offset, st.m.data() + spec.offset,
                      st.v.data() + spec.offset, spec.numel, a.lr, t.beta1,
                      t.beta2, t.eps, t.weight_decay, a.step, a.grad_scale);
      k::fill_zero(st.stream, st.grads.data(),
                   static_cast<int64_t>(st.grads.size()));
      return caf::ok_atom_v;
    },
  };
}

} // namespace

expert_shard_actor spawn_expert_shard(caf::actor_system& sys,
                                      expert_shard_args args) {
  return sys.spawn<caf::detached>(expert_shard, std::move(args));
}

} // namespace tutti
