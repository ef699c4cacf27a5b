#include "tutti/serve/ep_ranks.hpp"
#include "tutti/serve/expert_loading.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "ep_actors.hpp"
#include "ep_world.hpp"
#include "remote_sequences.hpp"
#include "tutti/runtime/blocking_request.hpp"
#include "tutti/runtime/log.hpp"

namespace tutti::serve {

struct ep_ranks::actors {
  explicit actors(caf::actor_system& sys) : system(sys) {}
  caf::actor_system& system;
  supervisor_actor experts; // the tier's supervisor
  caf::actor watch;         // its parent: keeps the tier_record
  std::shared_ptr<tier_record> tier = std::make_shared<tier_record>();
  std::vector<caf::actor> ranks;
  std::vector<std::shared_ptr<rank_signals>> signals;
  daemon_world world; // across daemons
  // forward()'s: one for all the steps (the scheduler's thread calls it).
  std::unique_ptr<caf::scoped_actor> stepper;
};

namespace {

// The tier supervisor's parent: counts its restarts of the shards'
// supervisor and records why it gave up.
caf::behavior watch_tier(caf::event_based_actor*,
                         std::shared_ptr<tier_record> tier) {
  return {
    [tier](const child_restarted& r) {
      ++tier->restarts;
      log_warn("serve", "expert tier restarted (" + r.reason
                          + "): its shards start again from the model's "
                            "weights");
    },
    [tier](escalate_atom, const std::string& why) {
      {
        std::lock_guard lock(tier->mutex);
        tier->failure = "the expert tier gave up: " + why;
      }
      tier->failed = true;
      log_error("serve", "the expert tier gave up: " + why);
    },
  };
}

// The shards' supervisor under the tier, or an error while it is down.
expected<caf::actor> shards_supervisor(caf::blocking_actor* self,
                                       const supervisor_actor& tier,
                                       std::chrono::milliseconds timeout) {
  caf::actor out;
  std::string why = "no answer";
  self->request(tier, timeout, which_child_atom_v, std::string(shards_child_id))
    .receive([&](caf::actor& h) { out = std::move(h); },
             [&](caf::error& e) { why = self->system().render(e); });
  if (!out)
    return status::error("the expert shards' supervisor is not running: "
                         + why);
  return out;
}

} // namespace

expected<caf::actor> running_shard(caf::blocking_actor* self,
                                   const supervisor_actor& tier, int32_t rank,
                                   std::chrono::milliseconds timeout) {
  auto shards = shards_supervisor(self, tier, timeout);
  if (!shards)
    return shards.error();
  caf::actor out;
  std::string why = "no answer";
  self
    ->request(caf::actor_cast<supervisor_actor>(*shards), timeout,
              which_child_atom_v, shard_child_id(rank))
    .receive([&](caf::actor& h) { out = std::move(h); },
             [&](caf::error& e) { why = self->system().render(e); });
  if (!out)
    return status::error(why);
  return out;
}

expected<std::unique_ptr<ep_ranks>> ep_ranks::start(caf::actor_system& sys,
                                                    const served_model& model,
                                                    const ep_options& o) {
  const auto& s = model.shape;
  const bool across = o.cluster.spans_daemons();
  // The group: this process's ranks, or every daemon's.
  const int64_t group =
    across ? static_cast<int64_t>(o.cluster.nodes.size()) * o.ranks : o.ranks;
  const int64_t first = across ? o.cluster.node_rank * o.ranks : 0;
  if (o.ranks < 1 || (!o.layout && s.experts % group != 0))
    return status::error(
      std::string(across ? "serve.nodes x serve.ep_size " : "ep_size ")
      + std::to_string(group) + " must divide the model's "
      + std::to_string(s.experts) + " experts");
  auto layout = o.layout;
  if (!layout)
    layout = std::make_shared<const expert_layout>(
      expert_layout::contiguous(s.layers, s.experts, group).value());
  if (layout->layers != s.layers || layout->experts != s.experts
      || layout->ranks != group)
    return status::error("the expert layout places "
                         + std::to_string(layout->experts) + " experts of "
                         + std::to_string(layout->layers) + " layers on "
                         + std::to_string(layout->ranks)
                         + " ranks; the replica has " + std::to_string(group));
  TUTTI_RETURN_IF_ERROR(layout->check());
  if (!o.racks.empty() && static_cast<int64_t>(o.racks.size()) != group)
    return status::error("serve.racks names " + std::to_string(o.racks.size())
                         + " racks for a replica of " + std::to_string(group)
                         + " ranks");
  if (o.rack_aware_alltoall && o.racks.empty())
    return status::error("serve.rack_aware_alltoall needs serve.racks (a "
                         "rack per rank)");
  if (o.blocks_per_rank < 1)
    return status::error("the KV cache holds no block per rank");
  std::unique_ptr<ep_ranks> out(new ep_ranks());
  out->model_ = &model;
  out->options_ = o;
  out->first_ = first;
  // Across daemons only node 0's leader takes steps from the scheduler.
  out->driven_ = !across ? o.ranks : first == 0 ? 1 : 0;
  out->layout_ = std::make_shared<layout_cell>(layout);
  out->rank_activations_.assign(o.ranks,
                                std::vector<int64_t>(s.layers * s.experts, 0));
  const kv_geometry g = geometry_of_shape(s, o.block_tokens);
  const bool follows = across && first > 0;
  const bool dp = across && o.cluster.data_parallel_attention;
  // Across daemons a rank holding no sequences (not the leader, without
  // data_parallel_attention) keeps one block.
  for (int64_t r = 0; r < o.ranks; ++r)
    out->caches_.push_back(std::make_unique<kv_cache>(
      g, across && !dp && first + r > 0 ? 1 : o.blocks_per_rank));
  // Node 0's scheduler allocates the other ranks' blocks: caches that
  // track them without holding their keys and values.
  for (int64_t r = 1; dp && !follows && r < group; ++r)
    out->remote_caches_.push_back(
      std::make_unique<kv_cache>(g, o.blocks_per_rank, false));
  out->activations_.assign(s.layers * s.experts, 0);
  out->bytes_.assign(o.ranks, 0);
  out->link_bytes_.assign(o.ranks, link_bytes{});
  out->restarts_.assign(o.ranks, 0);
  out->actors_ = std::make_unique<actors>(sys);
  auto& act = *out->actors_;
  const auto ranks = static_cast<int32_t>(group);
  connect_fn connect;
  if (across) {
    auto c = connect_across_daemons(sys, o.cluster, o.timeout, o.guard_tls);
    if (!c)
      return c.error();
    connect = c.value().connect;
    out->actors_->world = std::move(c.value());
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
  // A group of one in this process: its rank runs its shard's tasks on
  // its own thread while the shard is up (ep_rank.cpp).
  const auto presence = ranks == 1 && !across
                          ? std::make_shared<shard_presence>()
                          : nullptr;
  std::vector<child_spec> shards;
  for (int64_t i = 0; i < o.ranks; ++i) {
    const auto r = static_cast<int32_t>(first + i);
    shards.push_back(
      {shard_child_id(r), restart_type::permanent,
       [&model, r, ranks, cell = out->layout_,
        presence](caf::actor_system& sys) {
         return caf::actor_cast<caf::actor>(
           spawn_serve_expert_shard(sys, {&model, r, ranks, cell, presence}));
       }});
  }
  supervisor_flags flags;
  flags.strategy = restart_strategy::one_for_one;
  flags.max_restarts = o.max_restarts;
  flags.period = o.restart_period;
  supervisor_flags tier_flags = flags;
  tier_flags.max_restarts = o.max_tier_restarts;
  act.watch = act.system.spawn(watch_tier, act.tier);
  act.experts = spawn_supervisor(
    act.system, "serve_expert_tier", tier_flags,
    {{shards_child_id, restart_type::permanent,
      [flags, shards = std::move(shards)](caf::actor_system& sys) {
        return caf::actor_cast<caf::actor>(
          spawn_supervisor(sys, shards_child_id, flags, shards, nullptr));
      }}},
    act.watch);
  for (int64_t i = 0; i < o.ranks; ++i) {
    const auto role = !across          ? rank_role::local
                      : first + i == 0 ? rank_role::leader
                                       : rank_role::follower;
    act.signals.push_back(std::make_shared<rank_signals>());
    act.ranks.push_back(spawn_ep_rank(
      act.system,
      {&model, out->caches_[i].get(), static_cast<int32_t>(first + i), ranks,
       connect, role, act.signals.back(), act.experts, act.tier, o.timeout,
       out->layout_, o.racks, o.rack_aware_alltoall, dp, o.dispatch, o.loader,
       presence}));
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
  act.stepper.reset();
  {
    caf::scoped_actor self{act.system};
    // The ranks given steps first: across daemons the leader's stop is a
    // collective that this process's followers take part in.
    // (A start that failed may have spawned none.)
    const auto led = std::min<size_t>(driven_, act.ranks.size());
    const std::vector<caf::actor> driven(act.ranks.begin(),
                                         act.ranks.begin() + led);
    for (auto& r : driven)
      self->send(r, stop_atom_v);
    self->wait_for(driven);
    for (auto& r : act.ranks)
      self->send(r, stop_atom_v);
    self->wait_for(act.ranks);
    // The shards' supervisor stops its shards; then the tier above it.
    if (act.experts) {
      if (auto shards = shards_supervisor(self.ptr(), act.experts,
                                          options_.timeout))
        self->send(caf::actor_cast<supervisor_actor>(*shards), stop_atom_v);
      self->send(act.experts, stop_atom_v);
      self->send_exit(act.watch, caf::exit_reason::user_shutdown);
    }
  }
  act.world.close(act.system);
  act.ranks.clear();
  act.experts = nullptr;
}

status ep_ranks::forward(const std::vector<seq_chunk>& batch,
                         std::vector<float>& logits) {
  const int64_t P = driven_, V = model_->shape.vocab;
  std::vector<rank_step_ptr> steps(P);
  for (auto& st : steps)
    st = std::make_shared<rank_step>();
  // Another daemon's chunks travel with node 0's rank's step.
  steps[0]->remote_chunks.resize(remote_caches_.size() + 1);
  for (const auto& c : batch) {
    if (c.rank < 0 || c.rank >= sequence_ranks())
      return status::error("ep_ranks: chunk for rank " + std::to_string(c.rank)
                           + " of " + std::to_string(sequence_ranks()));
    if (c.rank < P)
      steps[c.rank]->chunks.push_back(steps[c.rank]->hold(c));
    else
      steps[0]->remote_chunks[c.rank].push_back(steps[0]->hold(c));
  }
  auto& act = *actors_;
  if (!act.stepper)
    act.stepper = std::make_unique<caf::scoped_actor>(act.system);
  auto& self = *act.stepper;
  std::string error;
  // Every rank takes part in every step (the exchange is collective): all
  // are asked before any answer is awaited. The deadline is awaited here
  // (blocking_request.hpp), not through the clock thread, once a token.
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout * 2;
  std::vector<caf::message_id> pending;
  for (int64_t r = 0; r < P; ++r)
    pending.push_back(
      self->request(act.ranks[r], caf::infinite, steps[r]).id());
  for (int64_t r = 0; r < P; ++r)
    await_answer(
      self.ptr(), pending[r], deadline,
      [&](rank_step_ptr& done) { steps[r] = std::move(done); },
      [&](caf::error& e) {
        if (error.empty())
          error = "rank " + std::to_string(r) + ": " + self->system().render(e);
      });
  for (int64_t r = 0; r < P && error.empty(); ++r)
    if (!steps[r]->error.empty())
      error = steps[r]->error;
  if (!error.empty())
    return status::error(error);
  std::fill(activations_.begin(), activations_.end(), 0);
  offloaded_rows_ = routed_rows_ = 0;
  double waited = 0.0;
  for (int64_t r = 0; r < P; ++r) {
    rank_activations_[r] = steps[r]->activations;
    offloaded_rows_ += steps[r]->offloaded_rows;
    routed_rows_ += steps[r]->routed_rows;
    waited = std::max(waited, steps[r]->offload_wait_s);
    for (size_t i = 0; i < activations_.size(); ++i)
      activations_[i] += steps[r]->activations[i];
    // The other daemons' sequences' (data_parallel_attention), a step late.
    auto& sig = *act.signals[r];
    std::lock_guard lock(sig.mutex);
    for (size_t i = 0;
         i < sig.peer_activations.size() && i < activations_.size(); ++i)
      activations_[i] += sig.peer_activations[i];
    routed_rows_ += sig.peer_routed_rows;
    bytes_[r] = steps[r]->exchanged_bytes;
    link_bytes_[r] = steps[r]->exchanged_link_bytes;
    restarts_[r] = steps[r]->shard_restarts;
  }
  offload_wait_s_ += waited;
  // Merge the ranks' logits back into batch order.
  logits.clear();
  std::vector<int64_t> next(sequence_ranks(), 0);
  for (const auto& c : batch) {
    const int64_t rows = wanted_rows(c);
    const auto& from = c.rank < P ? steps[c.rank]->logits
                                  : steps[0]->remote_logits[c.rank];
    logits.insert(logits.end(), from.begin() + next[c.rank] * V,
                  from.begin() + (next[c.rank] + rows) * V);
    next[c.rank] += rows;
  }
  return {};
}

std::shared_ptr<const expert_layout> ep_ranks::layout() const {
  return layout_->get();
}

status ep_ranks::set_layout(std::shared_ptr<const expert_layout> x) {
  const auto now = layout_->get();
  if (!x || x->layers != now->layers || x->experts != now->experts
      || x->ranks != now->ranks)
    return status::error("a new expert layout must keep the replica's "
                         "layers, experts and ranks");
  if (now->offload_rank >= 0 || x->offload_rank >= 0)
    return status::error("a layout with offload is fixed at the start");
  TUTTI_RETURN_IF_ERROR(x->check());
  // The experts it moves here are read before any step runs on it.
  if (options_.loader)
    for (int64_t i = 0; i < size(); ++i)
      if (auto loaded = options_.loader->hold_rank(*x, first_ + i); !loaded)
        return loaded.error();
  layout_->set(std::move(x));
  return {};
}

int64_t ep_ranks::expert_loaded_bytes() const {
  return options_.loader ? options_.loader->loaded_bytes() : 0;
}

int64_t ep_ranks::exchanged_bytes() const {
  int64_t n = 0;
  for (auto b : bytes_)
    n += b;
  return n;
}

link_bytes ep_ranks::exchanged_link_bytes() const {
  link_bytes n{};
  for (const auto& b : link_bytes_)
    for (int l = 0; l < link_classes; ++l)
      n[l] += b[l];
  if (actors_)
    for (const auto& sig : actors_->signals)
      for (int l = 0; l < link_classes; ++l)
        n[l] += sig->peer_link_bytes[l];
  return n;
}

int64_t ep_ranks::shard_restarts() const {
  int64_t n = 0;
  for (auto r : restarts_)
    n += r;
  return n;
}

int64_t ep_ranks::tier_restarts() const { return actors_->tier->restarts; }

bool ep_ranks::stop_wanted() const {
  for (const auto& sig : actors_->signals)
    if (sig->stop_wanted)
      return true;
  return false;
}

bool ep_ranks::failed() const { return actors_->tier->failed; }

std::string ep_ranks::failure() const {
  std::lock_guard lock(actors_->tier->mutex);
  return actors_->tier->failure;
}

bool ep_ranks::shards_up() {
  auto& act = *actors_;
  for (const auto& sig : act.signals)
    if (!sig->joined || sig->ended || sig->broken)
      return false;
  if (failed())
    return false;
  caf::scoped_actor self{act.system};
  auto shards = shards_supervisor(self.ptr(), act.experts, options_.timeout);
  if (!shards)
    return false;
  bool up = false;
  self
    ->request(caf::actor_cast<supervisor_actor>(*shards), options_.timeout,
              children_atom_v)
    .receive(
      [&](std::vector<child_status>& children) {
        up = static_cast<int64_t>(children.size()) == size();
        for (const auto& c : children)
          up = up && c.running;
      },
      [](caf::error&) {});
  return up;
}

status ep_ranks::follow(const std::atomic<bool>& stop,
                        std::chrono::milliseconds grace) {
  auto& act = *actors_;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  for (;;) {
    bool ended = true;
    for (const auto& sig : act.signals)
      ended = ended && sig->ended;
    if (ended)
      break;
    if (stop && !deadline) {
      // Node 0 drains the service and then stops every daemon's rank.
      deadline = std::chrono::steady_clock::now() + grace;
      for (const auto& sig : act.signals)
        sig->stop_wanted = true;
    }
    if (deadline && std::chrono::steady_clock::now() >= *deadline)
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

// Rank r's running expert shard, as its supervisor hands it out.
expected<caf::actor> ep_ranks::shard_of(int64_t rank) {
  if (rank < 0 || rank >= size())
    return status::error("no rank " + std::to_string(rank) + " (ranks 0.."
                         + std::to_string(size() - 1) + ")");
  caf::scoped_actor self{actors_->system};
  // Shards are named by their rank in the group.
  auto shard = running_shard(self.ptr(), actors_->experts,
                             static_cast<int32_t>(first_ + rank),
                             options_.timeout);
  if (!shard)
    return status::error("expert shard of rank " + std::to_string(rank)
                         + " is not running: " + shard.message());
  return shard;
}

status ep_ranks::inject_fault(int64_t rank, const std::string& fault) {
  auto shard = shard_of(rank);
  if (!shard)
    return shard.error();
  caf::anon_send(caf::actor_cast<expert_shard_actor>(*shard), chaos_atom_v,
                 fault);
  return {};
}

status ep_ranks::kill_shard(int64_t rank) {
  auto shard = shard_of(rank);
  if (!shard)
    return shard.error();
  caf::anon_send_exit(*shard, caf::exit_reason::kill);
  return {};
}

std::vector<child_status> ep_ranks::shard_states() {
  std::vector<child_status> out;
  caf::scoped_actor self{actors_->system};
  auto shards = shards_supervisor(self.ptr(), actors_->experts,
                                  options_.timeout);
  if (!shards)
    return out;
  self
    ->request(caf::actor_cast<supervisor_actor>(*shards), options_.timeout,
              children_atom_v)
    .receive([&](std::vector<child_status>& children) { out = children; },
             [](caf::error&) {});
  return out;
}

} // namespace tutti::serve
