#include "tutti/serve/ep_ranks.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <atomic>

#include "ep_actors.hpp"

namespace tutti::serve {

struct ep_ranks::actors {
  explicit actors(caf::actor_system& sys) : system(sys) {}
  caf::actor_system& system;
  supervisor_actor experts;
  std::vector<caf::actor> ranks;
  std::shared_ptr<comm::memory_hub> hub;
};

expected<std::unique_ptr<ep_ranks>> ep_ranks::start(caf::actor_system& sys,
                                                    const served_model& model,
                                                    const ep_options& o) {
  const auto& s = model.shape;
  if (o.ranks < 1 || s.experts % o.ranks != 0)
    return status::error("ep_size " + std::to_string(o.ranks)
                         + " must divide the model's "
                         + std::to_string(s.experts) + " experts");
  if (o.blocks_per_rank < 1)
    return status::error("the KV cache holds no block per rank");
  std::unique_ptr<ep_ranks> out(new ep_ranks());
  out->model_ = &model;
  out->options_ = o;
  const kv_geometry g{s.layers, s.kv_heads, s.head_dim, o.block_tokens};
  for (int64_t r = 0; r < o.ranks; ++r)
    out->caches_.push_back(std::make_unique<kv_cache>(g, o.blocks_per_rank));
  out->activations_.assign(s.layers * s.experts, 0);
  out->bytes_.assign(o.ranks, 0);
  out->restarts_.assign(o.ranks, 0);
  out->actors_ = std::make_unique<actors>(sys);
  auto& act = *out->actors_;
  const auto ranks = static_cast<int32_t>(o.ranks);
  std::vector<child_spec> shards;
  for (int32_t r = 0; r < ranks; ++r)
    shards.push_back({shard_child_id(r), restart_type::permanent,
                      [&model, r, ranks](caf::actor_system& sys) {
                        return caf::actor_cast<caf::actor>(
                          spawn_serve_expert_shard(sys, {&model, r, ranks}));
                      }});
  supervisor_flags flags;
  flags.strategy = restart_strategy::one_for_one;
  flags.max_restarts = o.max_restarts;
  flags.period = o.restart_period;
  act.experts = spawn_supervisor(act.system, "serve_expert_shards", flags,
                                 std::move(shards), nullptr);
  act.hub = std::make_shared<comm::memory_hub>(0, ranks);
  static std::atomic<int64_t> replicas{0};
  const auto group = "serve/" + std::to_string(replicas++);
  for (int32_t r = 0; r < ranks; ++r)
    act.ranks.push_back(
      spawn_ep_rank(act.system, {&model, out->caches_[r].get(), r, ranks,
                                 act.hub, group, act.experts, o.timeout}));
  return out;
}

ep_ranks::~ep_ranks() {
  if (!actors_)
    return;
  auto& act = *actors_;
  {
    caf::scoped_actor self{act.system};
    for (auto& r : act.ranks)
      self->send(r, stop_atom_v);
    self->send(act.experts, stop_atom_v);
    self->wait_for(act.ranks);
  }
  act.ranks.clear();
  act.experts = nullptr;
}

status ep_ranks::forward(const std::vector<seq_chunk>& batch,
                         std::vector<float>& logits) {
  const int64_t P = size(), V = model_->shape.vocab;
  std::vector<rank_step_ptr> steps(P);
  for (auto& st : steps)
    st = std::make_shared<rank_step>();
  for (const auto& c : batch) {
    if (c.rank < 0 || c.rank >= P)
      return status::error("ep_ranks: chunk for rank " + std::to_string(c.rank)
                           + " of " + std::to_string(P));
    steps[c.rank]->chunks.push_back(c);
  }
  auto& act = *actors_;
  caf::scoped_actor self{act.system};
  std::string error;
  // Every rank takes part in every step (the exchange is collective): all
  // are asked before any answer is awaited.
  using handle = decltype(self->request(act.ranks[0], options_.timeout,
                                        steps[0]));
  std::vector<handle> pending;
  for (int64_t r = 0; r < P; ++r)
    pending.push_back(
      self->request(act.ranks[r], options_.timeout * 2, steps[r]));
  for (int64_t r = 0; r < P; ++r)
    pending[r].receive([&](rank_step_ptr& done) { steps[r] = std::move(done); },
                       [&](caf::error& e) {
                         if (error.empty())
                           error = "rank " + std::to_string(r) + ": "
                                   + self->system().render(e);
                       });
  for (int64_t r = 0; r < P && error.empty(); ++r)
    if (!steps[r]->error.empty())
      error = steps[r]->error;
  if (!error.empty())
    return status::error(error);
  std::fill(activations_.begin(), activations_.end(), 0);
  for (int64_t r = 0; r < P; ++r) {
    for (size_t i = 0; i < activations_.size(); ++i)
      activations_[i] += steps[r]->activations[i];
    bytes_[r] = steps[r]->exchanged_bytes;
    restarts_[r] = steps[r]->shard_restarts;
  }
  // Merge the ranks' logits back into batch order.
  logits.clear();
  std::vector<int64_t> next(P, 0);
  for (const auto& c : batch) {
    const int64_t rows = c.want == seq_chunk::logits::all    ? c.count
                         : c.want == seq_chunk::logits::last ? 1
                                                             : 0;
    const auto& from = steps[c.rank]->logits;
    logits.insert(logits.end(), from.begin() + next[c.rank] * V,
                  from.begin() + (next[c.rank] + rows) * V);
    next[c.rank] += rows;
  }
  return {};
}

int64_t ep_ranks::exchanged_bytes() const {
  int64_t n = 0;
  for (auto b : bytes_)
    n += b;
  return n;
}

int64_t ep_ranks::shard_restarts() const {
  int64_t n = 0;
  for (auto r : restarts_)
    n += r;
  return n;
}

bool ep_ranks::shards_up() {
  auto& act = *actors_;
  caf::scoped_actor self{act.system};
  bool up = false;
  self->request(act.experts, options_.timeout, children_atom_v)
    .receive(
      [&](std::vector<child_status>& children) {
        up = static_cast<int64_t>(children.size()) == size();
        for (const auto& c : children)
          up = up && c.running;
      },
      [](caf::error&) {});
  return up;
}

status ep_ranks::inject_fault(int64_t rank, const std::string& fault) {
  if (rank < 0 || rank >= size())
    return status::error("no rank " + std::to_string(rank));
  auto& act = *actors_;
  caf::scoped_actor self{act.system};
  std::string why;
  caf::actor shard;
  self
    ->request(act.experts, options_.timeout, which_child_atom_v,
              shard_child_id(static_cast<int32_t>(rank)))
    .receive([&](caf::actor& h) { shard = std::move(h); },
             [&](caf::error& e) { why = self->system().render(e); });
  if (!shard)
    return status::error(why);
  self->send(caf::actor_cast<expert_shard_actor>(shard), chaos_atom_v, fault);
  return {};
}

} // namespace tutti::serve
