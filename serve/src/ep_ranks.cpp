#include "tutti/serve/ep_ranks.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <atomic>
#include <thread>

#include "ep_actors.hpp"
#include "ep_world.hpp"

namespace tutti::serve {

struct ep_ranks::actors {
  explicit actors(caf::actor_system& sys) : system(sys) {}
  caf::actor_system& system;
  supervisor_actor experts;
  std::vector<caf::actor> ranks;
  std::vector<std::shared_ptr<rank_signals>> signals;
};

expected<std::unique_ptr<ep_ranks>> ep_ranks::start(caf::actor_system& sys,
                                                    const served_model& model,
                                                    const ep_options& o) {
  const auto& s = model.shape;
  const bool across = o.cluster.spans_daemons();
  if (across && o.ranks != 1)
    return status::error("serve.ep_size must be 1 when serve.nodes lists "
                         "several daemons (one rank each), got "
                         + std::to_string(o.ranks));
  // The group: this process's ranks, or one rank per daemon.
  const int64_t group = across ? static_cast<int64_t>(o.cluster.nodes.size())
                               : o.ranks;
  const int64_t first = across ? o.cluster.node_rank : 0;
  if (o.ranks < 1 || s.experts % group != 0)
    return status::error(std::string(across ? "the number of serve.nodes "
                                            : "ep_size ")
                         + std::to_string(group) + " must divide the model's "
                         + std::to_string(s.experts) + " experts");
  if (o.blocks_per_rank < 1)
    return status::error("the KV cache holds no block per rank");
  std::unique_ptr<ep_ranks> out(new ep_ranks());
  out->model_ = &model;
  out->options_ = o;
  const kv_geometry g{s.layers, s.kv_heads, s.head_dim, o.block_tokens};
  // A follower holds no sequences: one block keeps its engine well formed.
  const bool follows = across && first > 0;
  for (int64_t r = 0; r < o.ranks; ++r)
    out->caches_.push_back(
      std::make_unique<kv_cache>(g, follows ? 1 : o.blocks_per_rank));
  out->activations_.assign(s.layers * s.experts, 0);
  out->bytes_.assign(o.ranks, 0);
  out->restarts_.assign(o.ranks, 0);
  out->actors_ = std::make_unique<actors>(sys);
  auto& act = *out->actors_;
  const auto ranks = static_cast<int32_t>(group);
  connect_fn connect;
  if (across) {
    auto c = connect_across_daemons(sys, o.cluster, o.timeout);
    if (!c)
      return c.error();
    connect = std::move(c.value());
  } else {
    auto hub = std::make_shared<comm::memory_hub>(0, ranks);
    static std::atomic<int64_t> replicas{0};
    comm::memory_options mo;
    mo.group = "serve/" + std::to_string(replicas++);
    mo.timeout = o.timeout;
    mo.connect_timeout = o.timeout;
    connect = [hub, mo](int rank, int size,
                        std::unique_ptr<comm::communicator>& c) {
      return comm::make_memory_communicator(*hub, rank, size, mo, c);
    };
  }
  std::vector<child_spec> shards;
  for (int64_t i = 0; i < o.ranks; ++i) {
    const auto r = static_cast<int32_t>(first + i);
    shards.push_back({shard_child_id(r), restart_type::permanent,
                      [&model, r, ranks](caf::actor_system& sys) {
                        return caf::actor_cast<caf::actor>(
                          spawn_serve_expert_shard(sys, {&model, r, ranks}));
                      }});
  }
  supervisor_flags flags;
  flags.strategy = restart_strategy::one_for_one;
  flags.max_restarts = o.max_restarts;
  flags.period = o.restart_period;
  act.experts = spawn_supervisor(act.system, "serve_expert_shards", flags,
                                 std::move(shards), nullptr);
  const auto role = !across       ? rank_role::local
                    : first == 0 ? rank_role::leader
                                 : rank_role::follower;
  for (int64_t i = 0; i < o.ranks; ++i) {
    act.signals.push_back(std::make_shared<rank_signals>());
    act.ranks.push_back(spawn_ep_rank(
      act.system,
      {&model, out->caches_[i].get(), static_cast<int32_t>(first + i), ranks,
       connect, role, act.signals.back(), act.experts, o.timeout}));
  }
  // Ranks in this process join at once: ready on return. Across daemons
  // the others may start later; shards_up() says when they have.
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  for (const auto& sig : act.signals)
    while (!across && !sig->joined && !sig->ended
           && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
  for (const auto& sig : act.signals)
    if (!sig->joined || sig->ended || sig->broken)
      return false;
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

status ep_ranks::follow(const std::atomic<bool>& stop) {
  auto& act = *actors_;
  for (;;) {
    bool ended = true;
    for (const auto& sig : act.signals)
      ended = ended && sig->ended;
    if (ended)
      break;
    if (stop)
      return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const auto& sig : act.signals) {
    std::lock_guard lock(sig->mutex);
    if (!sig->failure.empty())
      return status::error(sig->failure);
  }
  return {};
}

status ep_ranks::inject_fault(int64_t rank, const std::string& fault) {
  if (rank < 0 || rank >= size())
    return status::error("no rank " + std::to_string(rank));
  auto& act = *actors_;
  caf::scoped_actor self{act.system};
  std::string why;
  caf::actor shard;
  // Shards are named by their rank in the group.
  const auto in_group = options_.cluster.spans_daemons()
                          ? options_.cluster.node_rank + rank
                          : rank;
  self
    ->request(act.experts, options_.timeout, which_child_atom_v,
              shard_child_id(static_cast<int32_t>(in_group)))
    .receive([&](caf::actor& h) { shard = std::move(h); },
             [&](caf::error& e) { why = self->system().render(e); });
  if (!shard)
    return status::error(why);
  self->send(caf::actor_cast<expert_shard_actor>(shard), chaos_atom_v, fault);
  return {};
}

} // namespace tutti::serve
