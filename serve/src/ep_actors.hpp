#pragma once
// The actors of an expert-parallel serving replica (ep_ranks.hpp): a rank
// actor per device holding attention and its KV cache, and an expert shard
// per rank holding that rank's experts, as in training. Both are spawned
// detached: their work blocks on the kernels and on the collectives.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "tutti/config/enums.hpp"
#include "tutti/protocol/interfaces.hpp"
#include "tutti/runtime/supervisor.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/expert_layout.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/link_bytes.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/serve/request.hpp"

namespace tutti::serve {

class expert_loader; // expert_loading.hpp

// The replica's current layout, shared by its ranks and shards. It is
// replaced only between steps (ep_ranks::set_layout; across daemons node
// 0's rank sends it to the others before the next step), so every layer of
// a step sees one layout.
class layout_cell {
public:
  explicit layout_cell(std::shared_ptr<const expert_layout> x)
    : x_(std::move(x)) {}
  std::shared_ptr<const expert_layout> get() const {
    std::lock_guard lock(mutex_);
    return x_;
  }
  void set(std::shared_ptr<const expert_layout> x) {
    std::lock_guard lock(mutex_);
    x_ = std::move(x);
    ++version_;
  }
  int64_t version() const {
    std::lock_guard lock(mutex_);
    return version_;
  }

private:
  mutable std::mutex mutex_;
  std::shared_ptr<const expert_layout> x_;
  int64_t version_ = 0;
};

// One engine step of one rank: its chunks in, the wanted rows' logits out.
struct rank_step {
  // A chunk whose tokens and block table point into this step's own
  // copies: a step still running after ep_ranks::forward gave up on it
  // (its answer timed out) never reads the scheduler's requests, which
  // may be gone by then.
  seq_chunk hold(seq_chunk c) {
    c.tokens = held.emplace_back(c.tokens, c.tokens + c.count).data();
    if (c.blocks)
      c.blocks = &held.emplace_back(*c.blocks);
    return c;
  }
  std::deque<std::vector<int32_t>> held; // a deque: elements never move
  std::vector<seq_chunk> chunks;
  std::vector<float> logits;
  std::string error;                 // empty: the step ran
  std::vector<int64_t> activations;  // the rank's routed tokens so far
  int64_t exchanged_bytes = 0;       // sent by its all-to-alls so far
  link_bytes exchanged_link_bytes{}; // the same by link class
  int64_t shard_restarts = 0;        // restarts of its shard it survived
  // Offload (offload_layout.hpp): rows (token, layer) of this rank that
  // chose an offloaded expert, and all its routed rows, so far; seconds
  // this step waited in the combine of layers where its rows chose an
  // offloaded expert.
  int64_t offloaded_rows = 0, routed_rows = 0;
  double offload_wait_s = 0.0;
  // Node 0's rank with data_parallel_attention: the other daemons'
  // chunks and the logits of their wanted rows, [group rank] (0 unused).
  std::vector<std::vector<seq_chunk>> remote_chunks;
  std::vector<std::vector<float>> remote_logits;
};
using rank_step_ptr = std::shared_ptr<rank_step>;

// What a rank of a group of one needs to know of its expert shard to run
// the shard's tasks on its own thread (ep_rank.cpp): which shard is up,
// by actor id (0: none), and whether a fault is armed on it. Every
// incarnation of the rank's shard shares it.
struct shard_presence {
  std::atomic<uint64_t> running{0};
  std::atomic<bool> fault_armed{false};
};

// The experts the current layout puts on `rank`, layer by layer, of `model`, which
// outlives the shard (the service owns it; a restarted shard reads the same
// weights, so a restart loses nothing).
struct serve_shard_args {
  const served_model* model = nullptr;
  int32_t rank = 0;
  int32_t ranks = 1;
  std::shared_ptr<layout_cell> layout;
  std::shared_ptr<shard_presence> presence; // a group of one's; else null
};

// A task's rows through the experts `args` names (what the shard does
// with an expert_fwd); `ab` and `h` are scratch. Throws where an expert
// is not loaded here.
void compute_shard_task(const serve_shard_args& args, expert_task& task,
                        std::vector<float>& ab, std::vector<float>& h);

expert_shard_actor spawn_serve_expert_shard(caf::actor_system& sys,
                                            serve_shard_args args);

// The id of rank r's shard under the replica's supervisor.
inline std::string shard_child_id(int32_t rank) {
  return "expert_shard/" + std::to_string(rank);
}

// The expert tier, nested as OTP nests supervisors: the shards' supervisor
// (one_for_one, ep_options::max_restarts per period) is the one child of
// the tier's supervisor, which starts it again, shards and all, when it
// gives up. When the tier gives up too, the actor watching it records why
// here and the replica ends (service::failure).
inline constexpr const char* shards_child_id = "serve_expert_shards";

struct tier_record {
  std::atomic<int64_t> restarts{0}; // of the shards' supervisor
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::string failure; // why the tier gave up
};

// Rank `rank`'s running shard (its id in the group), looked up through
// the tier: an error while the shard or its supervisor is down.
expected<caf::actor> running_shard(caf::blocking_actor* self,
                                   const supervisor_actor& tier, int32_t rank,
                                   std::chrono::milliseconds timeout);

// How a rank joins its group: the in-process memory communicator, or Gloo
// across daemons (ep_world.cpp). Called on the rank's own thread.
using connect_fn = std::function<status(
  int rank, int size, std::unique_ptr<comm::communicator>& out)>;

// A rank's part in the steps: `local` ranks all get their steps from
// ep_ranks::forward; across daemons the `leader` (node 0's) opens each
// step with a one-number collective that `follower`s wait on.
enum class rank_role { local, leader, follower };

// What a rank tells the ep_ranks that started it, from its thread.
struct rank_signals {
  std::atomic<bool> joined{false}; // its communicator is up
  std::atomic<bool> ended{false};
  std::atomic<bool> broken{false}; // its group failed; steps fail from now
  // A stop asked for across daemons: set on a follower by its SIGTERM
  // (ep_ranks::follow), it reaches node 0's rank with the next header.
  std::atomic<bool> stop_wanted{false};
  // Node 0's rank across daemons: the other daemons' all-to-all bytes by
  // link class, as of the last step header.
  std::array<std::atomic<int64_t>, link_classes> peer_link_bytes{};
  std::mutex mutex;
  std::string failure; // why it ended, if not by a stop
  // With data_parallel_attention, node 0's rank: the other daemons'
  // routed tokens, [layer * experts + e], and rows, as of the last header.
  std::vector<int64_t> peer_activations;
  int64_t peer_routed_rows = 0;
};

struct ep_rank_args {
  const served_model* model = nullptr;
  kv_cache* cache = nullptr; // the rank's; the scheduler allocates its blocks
  int32_t rank = 0;          // in the group
  int32_t ranks = 1;
  connect_fn connect;
  rank_role role = rank_role::local;
  std::shared_ptr<rank_signals> signals;
  supervisor_actor experts; // the expert tier's supervisor
  std::shared_ptr<const tier_record> tier;
  std::chrono::milliseconds timeout{30000}; // a collective, a shard request
  std::shared_ptr<layout_cell> layout;      // where dispatch sends rows
  std::vector<int32_t> racks;               // per rank of the group; empty: one
  bool rack_aware_alltoall = false;         // moe::make_token_exchange: rack
  // Across daemons: every daemon's rank holds sequences (ep_ranks.hpp).
  bool data_parallel_attention = false;
  dispatch_dtype dispatch = dispatch_dtype::fp32; // serve.dispatch_dtype
  // A daemon holding only its own experts: those a layout from node 0
  // moves here are loaded before it is taken (ep_options::loader).
  std::shared_ptr<expert_loader> loader;
  // A group of one in this process: its shard's presence, so that the
  // rank runs the shard's tasks itself while that shard is up and no
  // fault is armed on it (null: always through the shard).
  std::shared_ptr<shard_presence> shard;
};

// Answers each rank_step_ptr with it, filled in; ends on stop_atom.
caf::actor spawn_ep_rank(caf::actor_system& sys, ep_rank_args args);

// A request on its way from submit() to the scheduler actor, which moves
// it out.
using request_handoff = std::shared_ptr<std::unique_ptr<request>>;

} // namespace tutti::serve

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::serve::rank_step_ptr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tutti::serve::request_handoff)
