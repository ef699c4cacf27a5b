// A rank of an expert-parallel serving replica: attention and its KV cache
// in an engine whose experts go through a dispatch, the expert shards of
// the ranks (compute) and the way back, as training's MoE block does, over
// the ranks' communicator and through the same moe::token_exchange. Each
// row's output comes back to the slot it left from and is summed in slot
// order by the engine, so the tokens are those of the one-rank engine,
// wherever the layout (expert_layout.hpp) puts the experts and whichever
// exchange the config chose: with serve.rack_aware_alltoall one relay per
// rack (a token crossing to a rack once), which leaves the rows as the
// flat exchange does: the same bits, fewer bytes across racks. The
// communicator is the in-process one, or Gloo across daemons, where node
// 0's rank leads each step and the others follow it (ep_ranks.hpp).

#include <caf/blocking_actor.hpp>

#include <thread>
#include <utility>

#include "ep_actors.hpp"
#include "remote_sequences.hpp"
#include "tutti/runtime/blocking_request.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/moe/token_exchange.hpp"
#include "tutti/serve/expert_loading.hpp"

namespace tutti::serve {

namespace {

class actor_exchange final : public expert_exchange {
public:
  actor_exchange(caf::blocking_actor* self, comm::communicator& comm,
                 const ep_rank_args& a);

  status run(int64_t layer, const float* xn, const int32_t* topk, int64_t rows,
             float* out) override;

  int64_t exchanged_bytes() const { return bytes_; }
  const link_bytes& exchanged_link_bytes() const { return link_; }
  int64_t restarts() const { return restarts_; }
  int64_t offloaded_rows() const { return offloaded_rows_; }
  int64_t routed_rows() const { return routed_rows_; }
  // Seconds waited on offloaded experts since the last call.
  double take_step_wait() { return std::exchange(step_wait_s_, 0.0); }

private:
  status compute(const expert_task_ptr& task);
  status find_shard(const caf::actor& failed);
  bool count_offloaded(const expert_layout& x, int64_t layer,
                       const int32_t* topk, int64_t rows);
  // Bytes this rank sent to each rank, into link_ and bytes_.
  void count_links(const std::vector<int64_t>& bytes_to);

  caf::blocking_actor* self_;
  comm::communicator& comm_;
  const ep_rank_args& a_;
  expert_shard_actor shard_;
  std::vector<int64_t> rack_of_; // per rank of the group
  // Dispatch and the way back, the strategy chosen by the config; null
  // (and made_ why) if it could not be made.
  std::unique_ptr<moe::token_exchange> exchange_;
  status made_;
  moe::exchange_plan plan_; // the layer's
  link_bytes link_{};
  int64_t bytes_ = 0, restarts_ = 0, offloaded_rows_ = 0, routed_rows_ = 0;
  double step_wait_s_ = 0.0;
  std::vector<int64_t> order_;       // dispatch row -> slot
  std::vector<int32_t> slot_of_row_; // the same, as the kernels take it
  kernels::tensor<float> send_;      // the dispatch order, where packed
  std::vector<float> input_, output_, returned_;
  serve_shard_args own_shard_; // what the shard computes, for a group of one
  std::vector<float> ab_, h_;  // its scratch
};

actor_exchange::actor_exchange(caf::blocking_actor* self,
                               comm::communicator& comm, const ep_rank_args& a)
  : self_(self), comm_(comm), a_(a),
    rack_of_(a.ranks, 0), own_shard_{a.model, a.rank, a.ranks, a.layout,
                                     nullptr} {
  if (static_cast<int64_t>(a.racks.size()) == a.ranks)
    for (int32_t p = 0; p < a.ranks; ++p)
      rack_of_[p] = a.racks[p];
  moe::exchange_options o;
  o.rack_aware = a.rack_aware_alltoall;
  o.dispatch = a.dispatch;
  o.racks = moe::rack_layout(rack_of_);
  auto made = moe::make_token_exchange(comm, kernels::cpu_stream(), o);
  if (made.ok())
    exchange_ = std::move(made.value());
  else
    made_ = made.error();
}

void actor_exchange::count_links(const std::vector<int64_t>& bytes_to) {
  for (int64_t p = 0; p < static_cast<int64_t>(bytes_to.size()); ++p) {
    const auto l = p == a_.rank                       ? link_class::self
                   : rack_of_[p] == rack_of_[a_.rank] ? link_class::intra_rack
                                                      : link_class::inter_rack;
    link_[static_cast<int>(l)] += bytes_to[p];
    bytes_ += bytes_to[p];
  }
}

// Waits for the tier's running shard of this rank, other than `failed`
// (its supervisor, or the tier above it, is starting it again).
status actor_exchange::find_shard(const caf::actor& failed) {
  const auto deadline = std::chrono::steady_clock::now() + a_.timeout;
  std::string why = "no answer";
  while (std::chrono::steady_clock::now() < deadline && !a_.tier->failed) {
    auto found = running_shard(self_, a_.experts, a_.rank, a_.timeout);
    if (found && *found != failed) {
      shard_ = caf::actor_cast<expert_shard_actor>(*found);
      return {};
    }
    if (!found)
      why = found.message();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (a_.tier->failed) {
    // The replica is done: the other ranks, waiting for this one in the
    // step's exchange, fail now rather than at their timeout.
    (void)comm_.abort();
    return status::error("rank " + std::to_string(a_.rank)
                         + ": the expert tier gave up");
  }
  return status::error("rank " + std::to_string(a_.rank)
                       + ": no expert shard within the timeout (" + why + ")");
}

// The shard computes the task; when it fails, its supervisor restarts it
// and the task goes again, whole (its input is the rank's, untouched), so
// the output is what the first try would have given. The supervisors'
// restart budgets bound the retries: past them the tier gives up and
// find_shard says so.
status actor_exchange::compute(const expert_task_ptr& task) {
  for (;;) {
    if (!shard_)
      TUTTI_RETURN_IF_ERROR(find_shard(nullptr));
    // A group of one runs its shard's task here, the shard's own code on
    // the same weights, while that shard is up and no fault is armed on
    // it: two thread switches a layer fewer. A shard that went down, or
    // one armed with a fault, takes the task itself, and its failure is
    // met as below.
    if (a_.shard && !a_.shard->fault_armed
        && a_.shard->running == shard_.id()) {
      try {
        compute_shard_task(own_shard_, *task, ab_, h_);
        return {};
      } catch (const std::exception&) {
        // The shard meets the same error as its own failure, below.
      }
    }
    std::string why;
    // Once a layer a token: the deadline awaited here, not by the clock
    // thread (blocking_request.hpp).
    request_until(
      self_, shard_, std::chrono::steady_clock::now() + a_.timeout,
      [](caf::ok_atom) {},
      [&](caf::error& e) { why = self_->system().render(e); },
      expert_fwd_atom_v, task);
    if (why.empty())
      return {};
    log_warn("ep_rank", "rank " + std::to_string(a_.rank)
                          + ": expert shard "
                            "failed ("
                          + why + "); waiting for its restart");
    auto failed = caf::actor_cast<caf::actor>(shard_);
    shard_ = nullptr;
    TUTTI_RETURN_IF_ERROR(find_shard(failed));
    ++restarts_;
  }
}

status actor_exchange::run(int64_t layer, const float* xn, const int32_t* topk,
                           int64_t rows, float* out) {
  if (!exchange_)
    return made_.with_context("rank " + std::to_string(a_.rank) + ": ");
  const auto& s = a_.model->shape;
  const auto layout = a_.layout->get();
  const auto& x = *layout;
  const int64_t P = a_.ranks, E = s.experts, K = s.top_k;
  const int64_t D = s.hidden, slots = rows * K;
  // Dispatch order: slots by their expert's position in the layout (so by
  // owning rank), each expert's in order.
  moe::routed_rows in;
  in.expert_rows.assign(E, 0);
  for (int64_t t = 0; t < slots; ++t)
    ++in.expert_rows[x.position_of(layer, topk[t])];
  std::vector<int64_t> at(E + 1, 0);
  for (int64_t e = 0; e < E; ++e)
    at[e + 1] = at[e] + in.expert_rows[e];
  order_.resize(slots);
  for (int64_t t = 0; t < slots; ++t)
    order_[at[x.position_of(layer, topk[t])]++] = t;
  slot_of_row_.assign(order_.begin(), order_.end());
  const bool touches = count_offloaded(x, layer, topk, rows);
  in.expert_first.resize(P + 1);
  for (int64_t p = 0; p <= P; ++p)
    in.expert_first[p] = x.begin(layer, p);
  in.tokens = xn;
  in.tokens_count = rows;
  in.d = D;
  in.k = K;
  in.slot_of_row = slot_of_row_.data();
  in.rows = slots;
  exchange_->reset_bytes();
  moe::exchange_clock untimed;
  returned_.resize(slots * D);
  // In a group of one the experts' order is the dispatch order: the shard
  // writes its outputs where they return to.
  const bool in_place = exchange_->experts_order_is_dispatch_order();
  TUTTI_RETURN_IF_ERROR(exchange_->dispatch(
    in, plan_, send_,
    [&](const moe::exchange_plan& p) -> expected<float*> {
      input_.resize(p.recv_rows * D);
      output_.resize(in_place ? 0 : p.recv_rows * D);
      return input_.data();
    },
    untimed));
  const int64_t m = plan_.recv_rows;
  float* experts_out = in_place ? returned_.data() : output_.data();
  if (m > 0) {
    auto task = std::make_shared<expert_task>();
    task->layer = layer;
    task->input = input_.data();
    task->output = experts_out;
    task->rows_per_expert = plan_.rows_per_expert.data();
    task->rows = m;
    TUTTI_RETURN_IF_ERROR(compute(task));
  }
  // The way back: outputs return in the order their rows came, not summed
  // on the way (the engine sums a token's outputs in slot order with its
  // own code; training's relays sum a token's leading slots with
  // training's kernel, moe/rack_plan.hpp, which is not this one). Where
  // this rank's rows chose an offloaded expert, the time spent here is the
  // wait on the offload rank (it ends when the slowest rank has sent).
  const auto combine_start = std::chrono::steady_clock::now();
  TUTTI_RETURN_IF_ERROR(exchange_->combine(plan_, 0, moe::combine_kind::outputs,
                                           experts_out, returned_.data(),
                                           nullptr, untimed));
  count_links(exchange_->bytes_to());
  if (touches)
    step_wait_s_ += std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - combine_start)
                      .count();
  for (int64_t i = 0; i < slots; ++i)
    std::copy_n(returned_.data() + i * D, D, out + order_[i] * D);
  return {};
}

// Counts the layer's rows and those that chose an offloaded expert;
// whether there was one.
bool actor_exchange::count_offloaded(const expert_layout& x, int64_t layer,
                                     const int32_t* topk, int64_t rows) {
  routed_rows_ += rows;
  if (x.offload_rank < 0)
    return false;
  const int64_t K = a_.model->shape.top_k;
  int64_t touched = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k)
      if (x.is_offloaded(layer, topk[r * K + k])) {
        ++touched;
        break;
      }
  offloaded_rows_ += touched;
  return touched > 0;
}

// The leader's collective before each step; followers learn from it what
// comes next (and with data_parallel_attention how many words of chunks
// follow), and the leader their all-to-all bytes by link and, with
// data_parallel_attention, their routed tokens so far (its /metrics shows
// the whole group's, a step late).
// new_layout: the layout's order and bounds follow, in one sum.
enum step_header : int64_t {
  keep_alive = 0,
  run_step = 1,
  stop_ranks = 2,
  new_layout = 3
};

// The leader sends a keep-alive this often while idle, well within the
// followers' collective timeout.
constexpr auto keep_alive_every = std::chrono::seconds(1);

status exchange_header(comm::communicator& comm, const ep_rank_args& a,
                       int64_t& header, int64_t& chunk_words,
                       const link_bytes& mine,
                       const std::vector<int64_t>& activations) {
  // A follower's routed tokens per (layer, expert), then its routed rows.
  const size_t routed = a.data_parallel_attention
                          ? size_t(a.model->shape.layers
                                   * a.model->shape.experts)
                              + 1
                          : 0;
  // [0] the header, [1] chunk words (node 0's); [2] followers asking the
  // service to stop (a SIGTERM there), their link bytes, their routing.
  constexpr size_t links_at = 3;
  std::vector<int64_t> buf(links_at + link_classes + routed, 0);
  if (comm.rank() == 0) {
    buf[0] = header;
    buf[1] = chunk_words;
  } else {
    buf[2] = a.signals->stop_wanted ? 1 : 0;
    std::copy(mine.begin(), mine.end(), buf.begin() + links_at);
    std::copy_n(activations.begin(), std::min(routed, activations.size()),
                buf.begin() + links_at + link_classes);
  }
  TUTTI_RETURN_IF_ERROR(comm.all_reduce_sum(buf.data(), buf.size()));
  header = buf[0];
  chunk_words = buf[1];
  if (comm.rank() == 0) {
    if (buf[2] > 0)
      a.signals->stop_wanted = true;
    for (int l = 0; l < link_classes; ++l)
      a.signals->peer_link_bytes[l] = buf[links_at + l];
    std::lock_guard lock(a.signals->mutex);
    a.signals->peer_activations.assign(buf.begin() + links_at + link_classes,
                                       buf.end() - (routed ? 1 : 0));
    a.signals->peer_routed_rows = routed ? buf.back() : 0;
  }
  return {};
}

// Node 0's rank sends its current layout; the others take it (a sum with
// zeros from them), between steps. Only order and bounds travel: offload
// is fixed at the start.
status share_layout(comm::communicator& comm, layout_cell& cell,
                    expert_loader* loader) {
  const auto now = cell.get();
  const int64_t L = now->layers, E = now->experts, P = now->ranks;
  std::vector<int64_t> buf(L * E + L * (P + 1), 0);
  if (comm.rank() == 0) {
    std::copy(now->order.begin(), now->order.end(), buf.begin());
    std::copy(now->bounds.begin(), now->bounds.end(), buf.begin() + L * E);
  }
  TUTTI_RETURN_IF_ERROR(comm.all_reduce_sum(buf.data(), buf.size()));
  if (comm.rank() == 0)
    return {};
  // Node 0's other ranks share the leader's cell, which holds it already:
  // setting it again would bump its version and have the leader send it
  // once more at the next step.
  const std::vector<int64_t> bounds(buf.begin() + L * E, buf.end());
  if (std::equal(now->order.begin(), now->order.end(), buf.begin())
      && now->bounds == bounds)
    return {};
  auto got = expert_layout::from_order(
    L, E, P, std::vector<int32_t>(buf.begin(), buf.begin() + L * E),
    bounds);
  if (!got)
    return status::error("the layout node 0 sent: " + got.message());
  if (loader)
    if (auto loaded = loader->hold_rank(got.value(), comm.rank()); !loaded)
      return loaded.error();
  cell.set(std::make_shared<const expert_layout>(std::move(got.value())));
  return {};
}

void end_rank(const ep_rank_args& a, const std::string& failure) {
  if (!failure.empty()) {
    log_error("ep_rank", "rank " + std::to_string(a.rank) + ": " + failure);
    std::lock_guard lock(a.signals->mutex);
    a.signals->failure = failure;
  }
  a.signals->ended = true;
}

// A follower's step: with data_parallel_attention it first takes its
// chunks from node 0 (`chunk_words` of them came in the header) and after
// the step sends back their logits; otherwise it holds no sequences and
// serves its peers' rows.
status follow_step(const ep_rank_args& a, comm::communicator& comm, engine& eng,
                   int64_t chunk_words, received_chunks& mine,
                   std::vector<float>& logits) {
  if (!a.data_parallel_attention)
    return eng.forward({}, logits);
  static const std::vector<std::vector<seq_chunk>> none;
  std::vector<int64_t> buf(chunk_words, 0);
  TUTTI_RETURN_IF_ERROR(share_chunks(comm, buf, a.cache->total_blocks(), mine));
  TUTTI_RETURN_IF_ERROR(eng.forward(mine.chunks, logits));
  std::vector<std::vector<float>> unused;
  return gather_logits(comm, a.model->shape.vocab, none, logits, unused);
}

// Node 0's rank's step: the other daemons' chunks out first
// (data_parallel_attention; `encoded`, whose length went in the header),
// its own step, their logits back.
status lead_step(const ep_rank_args& a, comm::communicator& comm, engine& eng,
                 std::vector<int64_t>& encoded, rank_step& step) {
  if (!a.data_parallel_attention)
    return eng.forward(step.chunks, step.logits);
  received_chunks nothing;
  TUTTI_RETURN_IF_ERROR(share_chunks(comm, encoded, 0, nothing));
  TUTTI_RETURN_IF_ERROR(eng.forward(step.chunks, step.logits));
  return gather_logits(comm, a.model->shape.vocab, step.remote_chunks, {},
                       step.remote_logits);
}

// A rank of another daemon: it takes part in each layer's exchange of
// every step node 0's rank opens (with its own sequences under
// data_parallel_attention), until told to stop or until node 0 stops
// answering.
void follow_steps(caf::blocking_actor* self, const ep_rank_args& a,
                  comm::communicator& comm, engine& eng,
                  const actor_exchange& exchange) {
  std::vector<float> logits;
  std::vector<int64_t> routed; // routed tokens, then routed rows
  received_chunks mine;
  for (;;) {
    bool stopped = false;
    self->receive([&](stop_atom) { stopped = true; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    if (stopped)
      return end_rank(a, {});
    int64_t header = 0, chunk_words = 0;
    routed = eng.expert_activations();
    routed.push_back(exchange.routed_rows());
    if (auto s = exchange_header(comm, a, header, chunk_words,
                                 exchange.exchanged_link_bytes(), routed);
        !s.ok())
      return end_rank(a, "node 0's rank: " + s.message());
    if (header == stop_ranks)
      return end_rank(a, {});
    if (header == new_layout)
      if (auto s = share_layout(comm, *a.layout, a.loader.get()); !s.ok())
        return end_rank(a, s.message());
    if (header == run_step)
      if (auto s = follow_step(a, comm, eng, chunk_words, mine, logits);
          !s.ok())
        return end_rank(a, s.message());
  }
}

// Across daemons, once joined: every daemon must run the same step
// protocol and, where they hold sequences, KV caches of the same blocks
// (node 0 hands out block ids for all of them). A config that differs is
// named here rather than found as garbage in a later step.
status check_daemons_agree(comm::communicator& comm, const ep_rank_args& a) {
  constexpr int64_t fields = 3;
  const int64_t P = comm.size(), me = comm.rank();
  std::vector<int64_t> buf(P * fields, 0);
  buf[me * fields] = a.data_parallel_attention ? 1 : 0;
  buf[me * fields + 1] = a.cache->geometry().block_tokens;
  buf[me * fields + 2] = a.data_parallel_attention ? a.cache->total_blocks()
                                                   : 0;
  TUTTI_RETURN_IF_ERROR(comm.all_reduce_sum(buf.data(), buf.size()));
  static const char* names[fields] = {"serve.data_parallel_attention",
                                      "serve.kv_block_tokens",
                                      "KV cache blocks (serve.kv_cache_bytes)"};
  for (int64_t p = 1; p < P; ++p)
    for (int64_t f = 0; f < fields; ++f)
      if (buf[p * fields + f] != buf[f])
        return status::error("rank " + std::to_string(p) + "'s " + names[f]
                             + ": " + std::to_string(buf[p * fields + f])
                             + ", rank 0's: " + std::to_string(buf[f])
                             + "; every daemon needs the same serve config");
  return {};
}

void ep_rank_main(caf::blocking_actor* self, ep_rank_args a) {
  kernels::use_single_threaded_blas();
  std::unique_ptr<comm::communicator> comm;
  const auto joined = a.connect(a.rank, a.ranks, comm);
  std::unique_ptr<actor_exchange> exchange;
  std::unique_ptr<engine> eng;
  auto agreed = joined;
  if (joined.ok() && a.role != rank_role::local)
    agreed = check_daemons_agree(*comm, a);
  if (!agreed.ok()) {
    log_error("ep_rank",
              "rank " + std::to_string(a.rank) + ": " + agreed.message());
    a.signals->broken = true;
  }
  if (joined.ok()) {
    exchange = std::make_unique<actor_exchange>(self, *comm, a);
    eng = std::make_unique<engine>(*a.model, *a.cache, exchange.get());
    a.signals->joined = true;
  } else {
    log_error("ep_rank",
              "rank " + std::to_string(a.rank) + ": " + joined.message());
  }
  if (a.role == rank_role::follower) {
    if (!eng)
      return end_rank(a, joined.message());
    if (!agreed.ok())
      return end_rank(a, agreed.message());
    return follow_steps(self, a, *comm, *eng, *exchange);
  }
  const bool leads = a.role == rank_role::leader;
  // The group's failure, once a header failed (or the daemons disagree).
  std::string broken = agreed.ok() || !joined.ok() ? "" : agreed.message();
  int64_t sent_layout = a.layout->version(); // the others start with it
  const std::vector<int64_t> no_activations;
  auto header = [&](int64_t h, int64_t chunk_words = 0) {
    if (!leads || !eng || !broken.empty())
      return;
    if (auto s = exchange_header(*comm, a, h, chunk_words,
                                 exchange->exchanged_link_bytes(),
                                 no_activations);
        !s.ok()) {
      broken = "the other daemons' ranks: " + s.message();
      a.signals->broken = true;
      log_error("ep_rank", "rank " + std::to_string(a.rank) + ": " + broken);
    }
  };
  bool running = true;
  self->receive_while(running)(
    [&](rank_step_ptr step) {
      if (!eng) {
        step->error = "rank " + std::to_string(a.rank) + ": "
                      + joined.message();
        return step;
      }
      // A layout replaced since the last step goes to the other daemons
      // first (ep_ranks::set_layout).
      if (leads && broken.empty() && a.layout->version() != sent_layout) {
        header(new_layout);
        if (broken.empty())
          if (auto s = share_layout(*comm, *a.layout, a.loader.get());
              !s.ok()) {
            broken = "sending the layout: " + s.message();
            a.signals->broken = true;
          }
        sent_layout = a.layout->version();
      }
      // The other daemons' chunks, encoded before the header that says
      // how long they are.
      auto encoded = leads && a.data_parallel_attention
                       ? encode_chunks(step->remote_chunks)
                       : std::vector<int64_t>();
      header(run_step, static_cast<int64_t>(encoded.size()));
      if (!broken.empty()) {
        step->error = broken;
      } else if (auto s = leads ? lead_step(a, *comm, *eng, encoded, *step)
                                : eng->forward(step->chunks, step->logits);
                 !s.ok()) {
        step->error = s.message();
        // The other daemons took part in the step's collectives: after a
        // failed one the group is out of step.
        if (leads && a.data_parallel_attention) {
          broken = "a step with the other daemons' sequences: " + s.message();
          a.signals->broken = true;
        }
      }
      step->activations = eng->expert_activations();
      step->exchanged_bytes = exchange->exchanged_bytes();
      step->exchanged_link_bytes = exchange->exchanged_link_bytes();
      step->shard_restarts = exchange->restarts();
      step->offloaded_rows = exchange->offloaded_rows();
      step->routed_rows = exchange->routed_rows();
      step->offload_wait_s = exchange->take_step_wait();
      return step;
    },
    [&](stop_atom) {
      header(stop_ranks);
      running = false;
    },
    caf::after(keep_alive_every) >> [&] { header(keep_alive); });
  end_rank(a, {});
}

} // namespace

caf::actor spawn_ep_rank(caf::actor_system& sys, ep_rank_args args) {
  return sys.spawn<caf::detached>(ep_rank_main, std::move(args));
}

} // namespace tutti::serve
