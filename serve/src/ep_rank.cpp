// A rank of an expert-parallel serving replica: attention and its KV cache
// in an engine whose experts go through an all-to-all (dispatch), the
// expert shards of the ranks (compute) and a second all-to-all (combine),
// as training's MoE block does, over the ranks' communicator. Each row's
// output comes back to the slot it left from and is summed in slot order
// by the engine, so the tokens are those of the one-rank engine. The
// communicator is the in-process one, or Gloo across daemons, where node
// 0's rank leads each step and the others follow it (ep_ranks.hpp).

#include <caf/blocking_actor.hpp>

#include <thread>

#include "ep_actors.hpp"
#include "tutti/actors/log.hpp"
#include "tutti/kernels/ops.hpp"

namespace tutti::serve {

namespace {

class actor_exchange final : public expert_exchange {
public:
  actor_exchange(caf::blocking_actor* self, comm::communicator& comm,
                 const ep_rank_args& a)
    : self_(self), comm_(comm), a_(a) {}

  status run(int64_t layer, const float* xn, const int32_t* topk, int64_t rows,
             float* out) override;

  int64_t exchanged_bytes() const { return bytes_; }
  int64_t restarts() const { return restarts_; }

private:
  status compute(const expert_task_ptr& task);
  status find_shard(const caf::actor& failed);

  caf::blocking_actor* self_;
  comm::communicator& comm_;
  const ep_rank_args& a_;
  expert_shard_actor shard_;
  int64_t bytes_ = 0, restarts_ = 0;
  std::vector<int64_t> order_, send_counts_, recv_counts_, send_n_, recv_n_,
    rows_per_expert_, placement_;
  std::vector<float> send_, recv_, input_, output_, back_, returned_;
};

// Waits for the supervisor's running shard, other than `failed`.
status actor_exchange::find_shard(const caf::actor& failed) {
  const auto deadline = std::chrono::steady_clock::now() + a_.timeout;
  std::string why = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    caf::actor found;
    self_
      ->request(a_.experts, a_.timeout, which_child_atom_v,
                shard_child_id(a_.rank))
      .receive([&](caf::actor& h) { found = std::move(h); },
               [&](caf::error& e) { why = self_->system().render(e); });
    if (found && found != failed) {
      shard_ = caf::actor_cast<expert_shard_actor>(found);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status::error("rank " + std::to_string(a_.rank)
                       + ": no expert shard within the timeout (" + why + ")");
}

// The shard computes the task; when it fails, its supervisor restarts it
// and the task goes again, whole (its input is the rank's, untouched), so
// the output is what the first try would have given.
status actor_exchange::compute(const expert_task_ptr& task) {
  for (int attempt = 0;; ++attempt) {
    if (!shard_)
      TUTTI_RETURN_IF_ERROR(find_shard(nullptr));
    std::string why;
    self_->request(shard_, a_.timeout, expert_fwd_atom_v, task)
      .receive([](caf::ok_atom) {},
               [&](caf::error& e) { why = self_->system().render(e); });
    if (why.empty())
      return {};
    if (attempt >= 3)
      return status::error("rank " + std::to_string(a_.rank)
                           + ": expert shard failed "
                           + std::to_string(attempt + 1) + " times: " + why);
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
  const auto& s = a_.model->shape;
  const int64_t P = a_.ranks, E = s.experts, per = E / P, K = s.top_k;
  const int64_t D = s.hidden, slots = rows * K;
  // Dispatch: slots by expert (so by owning rank), each expert's in order.
  send_counts_.assign(E, 0);
  for (int64_t t = 0; t < slots; ++t)
    ++send_counts_[topk[t]];
  std::vector<int64_t> at(E + 1, 0);
  for (int64_t e = 0; e < E; ++e)
    at[e + 1] = at[e] + send_counts_[e];
  order_.resize(slots);
  for (int64_t t = 0; t < slots; ++t)
    order_[at[topk[t]]++] = t;
  send_.resize(slots * D);
  for (int64_t i = 0; i < slots; ++i)
    std::copy_n(xn + (order_[i] / K) * D, D, send_.data() + i * D);
  recv_counts_.assign(E, 0);
  TUTTI_RETURN_IF_ERROR(
    comm_.all_to_all(send_counts_.data(), recv_counts_.data(), per));
  send_n_.assign(P, 0);
  recv_n_.assign(P, 0);
  rows_per_expert_.assign(per, 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < per; ++i) {
      send_n_[p] += send_counts_[p * per + i] * D;
      recv_n_[p] += recv_counts_[p * per + i] * D;
      rows_per_expert_[i] += recv_counts_[p * per + i];
    }
  int64_t m = 0;
  for (auto n : recv_n_)
    m += n / D;
  recv_.resize(m * D);
  TUTTI_RETURN_IF_ERROR(comm_.all_to_all_v(send_.data(), send_n_, recv_.data(),
                                           recv_n_, sizeof(float)));
  // Received rows are by source rank, then local expert; the shard takes
  // them by local expert, then source rank. placement_[received row] = its
  // row in the shard's task.
  placement_.resize(m);
  {
    std::vector<int64_t> next(per, 0);
    for (int64_t i = 1; i < per; ++i)
      next[i] = next[i - 1] + rows_per_expert_[i - 1];
    int64_t r = 0;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t i = 0; i < per; ++i)
        for (int64_t j = 0; j < recv_counts_[p * per + i]; ++j)
          placement_[r++] = next[i]++;
  }
  input_.resize(m * D);
  output_.resize(m * D);
  for (int64_t r = 0; r < m; ++r)
    std::copy_n(recv_.data() + r * D, D, input_.data() + placement_[r] * D);
  if (m > 0) {
    auto task = std::make_shared<expert_task>();
    task->layer = layer;
    task->input = input_.data();
    task->output = output_.data();
    task->rows_per_expert = rows_per_expert_.data();
    task->rows = m;
    TUTTI_RETURN_IF_ERROR(compute(task));
  }
  // Combine: outputs go back in the order their rows came.
  back_.resize(m * D);
  for (int64_t r = 0; r < m; ++r)
    std::copy_n(output_.data() + placement_[r] * D, D, back_.data() + r * D);
  returned_.resize(slots * D);
  TUTTI_RETURN_IF_ERROR(comm_.all_to_all_v(
    back_.data(), recv_n_, returned_.data(), send_n_, sizeof(float)));
  for (int64_t i = 0; i < slots; ++i)
    std::copy_n(returned_.data() + i * D, D, out + order_[i] * D);
  bytes_ += static_cast<int64_t>((send_.size() + back_.size()) * sizeof(float));
  return {};
}

// The leader's one-number collective before each step; followers learn
// from it what comes next.
enum step_header : int64_t { keep_alive = 0, run_step = 1, stop_ranks = 2 };

// The leader sends a keep-alive this often while idle, well within the
// followers' collective timeout.
constexpr auto keep_alive_every = std::chrono::seconds(1);

status exchange_header(comm::communicator& comm, int64_t& header) {
  if (comm.rank() != 0)
    header = 0;
  return comm.all_reduce_sum(&header, 1);
}

void end_rank(const ep_rank_args& a, const std::string& failure) {
  if (!failure.empty()) {
    log_error("ep_rank", "rank " + std::to_string(a.rank) + ": " + failure);
    std::lock_guard lock(a.signals->mutex);
    a.signals->failure = failure;
  }
  a.signals->ended = true;
}

// A rank of another daemon: no sequences of its own; it takes part in each
// layer's exchange of every step node 0's rank opens, until told to stop
// or until node 0 stops answering.
void follow_steps(caf::blocking_actor* self, const ep_rank_args& a,
                  comm::communicator& comm, engine& eng) {
  std::vector<float> none;
  for (;;) {
    bool stopped = false;
    self->receive([&](stop_atom) { stopped = true; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    if (stopped)
      return end_rank(a, {});
    int64_t header = 0;
    if (auto s = exchange_header(comm, header); !s.ok())
      return end_rank(a, "node 0's rank: " + s.message());
    if (header == stop_ranks)
      return end_rank(a, {});
    if (header == run_step)
      if (auto s = eng.forward({}, none); !s.ok())
        return end_rank(a, s.message());
  }
}

void ep_rank_main(caf::blocking_actor* self, ep_rank_args a) {
  kernels::use_single_threaded_blas();
  std::unique_ptr<comm::communicator> comm;
  const auto joined = a.connect(a.rank, a.ranks, comm);
  std::unique_ptr<actor_exchange> exchange;
  std::unique_ptr<engine> eng;
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
    return follow_steps(self, a, *comm, *eng);
  }
  const bool leads = a.role == rank_role::leader;
  std::string broken; // the group's failure, once a header failed
  auto header = [&](int64_t h) {
    if (!leads || !eng || !broken.empty())
      return;
    if (auto s = exchange_header(*comm, h); !s.ok()) {
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
      header(run_step);
      if (!broken.empty())
        step->error = broken;
      else if (auto s = eng->forward(step->chunks, step->logits); !s.ok())
        step->error = s.message();
      step->activations = eng->expert_activations();
      step->exchanged_bytes = exchange->exchanged_bytes();
      step->shard_restarts = exchange->restarts();
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
