#include "shard/shard_executor.hpp"

#include <algorithm>
#include <numeric>
#include <thread>
#include <type_traits>

#include "tutti/runtime/log.hpp"

namespace tutti {

namespace {

using clock_type = std::chrono::steady_clock;

// Restarts within one request: past this the failure is not transient and
// the rank gives up (the supervisor normally escalates long before).
constexpr int max_attempts = 16;

} // namespace

shard_executor::shard_executor(
  caf::blocking_actor* self, kernels::stream stream, supervisor_actor experts,
  std::string child_id, int64_t hidden, int64_t local_experts,
  std::chrono::milliseconds timeout, bool replayable,
  std::function<void(double, size_t)> on_restart, std::function<bool()> aborted)
  : self_(self), stream_(stream), experts_(std::move(experts)),
    child_id_(std::move(child_id)), timeout_(timeout),
    on_restart_(std::move(on_restart)), aborted_(std::move(aborted)),
    hidden_(hidden), local_experts_(local_experts), replayable_(replayable) {}

template <class Handle>
status shard_executor::await_reply(Handle& reply) {
  status result;
  bool timed_out = false;
  reply.receive([](caf::ok_atom) {},
                [&](caf::error& err) {
                  timed_out = err == caf::sec::request_timeout;
                  result = status::error(self_->system().render(err));
                });
  if (timed_out) {
    // The shard may still be working on our buffers: kill it, and go on
    // only once it is gone (its supervisor starts another).
    self_->monitor(shard_);
    self_->send_exit(shard_, caf::exit_reason::kill);
    bool down = false;
    while (!down)
      self_->receive(
        [&](caf::down_msg& dm) { down = dm.source == shard_.address(); });
  }
  return result;
}

template <class... Ts>
status shard_executor::ask(Ts&&... xs) {
  auto reply = self_->request(shard_, timeout_, std::forward<Ts>(xs)...);
  return await_reply(reply);
}

status shard_executor::connect() {
  status result;
  self_->request(experts_, timeout_, which_child_atom_v, child_id_)
    .receive(
      [&](caf::actor& h) { shard_ = caf::actor_cast<expert_shard_actor>(h); },
      [&](caf::error& err) {
        result = status::error("expert supervisor: "
                               + self_->system().render(err));
      });
  return result;
}

template <class T, class... Ts>
status shard_executor::fetch(T& out, Ts&&... xs) {
  status result;
  self_->request(shard_, timeout_, std::forward<Ts>(xs)...)
    .receive([&](T& value) { out = std::move(value); },
             [&](caf::error& err) {
               result = status::error(self_->system().render(err));
             });
  return result;
}

template <class F>
status shard_executor::with_restarts(bool replay, F&& once) {
  for (int attempt = 0;; ++attempt) {
    auto s = once();
    if (s.ok() || attempt == max_attempts)
      return s.ok() ? s : status::error("expert shard: " + s.message());
    TUTTI_RETURN_IF_ERROR(recover(s.message(), replay));
  }
}

expert_task_ptr shard_executor::make_task(const logged_task& t,
                                          float* output) const {
  auto task = std::make_shared<expert_task>();
  task->layer = t.layer;
  task->input = t.borrowed ? t.borrowed : t.input.data();
  task->output = output;
  task->rows_per_expert = t.rows_per_expert.empty() ? nullptr
                                                    : t.rows_per_expert.data();
  task->rows = t.rows;
  task->append = t.append;
  task->last_chunk = t.last_chunk;
  task->first_row = t.first_row;
  task->slot = t.slot;
  return task;
}

status shard_executor::send_task(const logged_task& t, float* output) {
  auto task = make_task(t, output);
  return t.forward ? ask(expert_fwd_atom_v, std::move(task))
                   : ask(expert_bwd_atom_v, std::move(task));
}

shard_executor::logged_task& shard_executor::next_entry() {
  if (logged_ == log_.size())
    log_.emplace_back();
  return log_[logged_++];
}

status shard_executor::run_logged(float* output) {
  return with_restarts(true,
                       [&] { return send_task(log_[logged_ - 1], output); });
}

void shard_executor::log_task(bool forward, int64_t layer, const float* in,
                              int64_t m, const int64_t* rows, bool append,
                              int64_t first_row) {
  auto& t = next_entry();
  t.forward = forward;
  t.append = append;
  t.last_chunk = true;
  t.first_row = first_row;
  t.layer = layer;
  t.slot = slot();
  t.borrowed = replayable_ ? nullptr : in;
  if (replayable_)
    t.input.assign(stream_, in, static_cast<size_t>(m * hidden_));
  if (rows)
    t.rows_per_expert.assign(rows, rows + local_experts_);
  else
    t.rows_per_expert.clear();
  t.rows = m;
  kernels::wait(stream_); // the shard reads it on its own stream
}

status shard_executor::forward(int64_t layer, const float* x,
                               const int64_t* rows, int64_t m, float* y,
                               bool append) {
  log_task(true, layer, x, m, rows, append, 0);
  return run_logged(y);
}

status shard_executor::backward(int64_t layer, const float* dy, int64_t m,
                                float* dx, const int64_t* rows,
                                int64_t first_row) {
  log_task(false, layer, dy, m, rows, false, first_row);
  return run_logged(dx);
}

// Chunk c+1 is sent before ready(c) runs, and awaited after it: the shard
// computes while the rank sends chunk c's results. A failed chunk is run
// again as run_logged would (restart, replay, retry) once the rank's side
// of the pipeline is done with the buffers.
template <class Atom>
status shard_executor::pipeline(Atom atom, int64_t layer, const float* in,
                                float* out, int64_t hidden,
                                const std::vector<std::vector<int64_t>>& rows,
                                const std::function<status(size_t)>& ready,
                                double& overlapped_s) {
  const bool forward = std::is_same_v<Atom, expert_fwd_atom>;
  const auto start = train::chunk_starts(rows);
  auto chunk = [&](size_t c) {
    log_task(forward, layer, in + start[c] * hidden, start[c + 1] - start[c],
             rows[c].data(), forward && c > 0, start[c]);
    log_[logged_ - 1].last_chunk = c + 1 == rows.size();
    return out + start[c] * hidden;
  };
  TUTTI_RETURN_IF_ERROR(run_logged(chunk(0)));
  for (size_t c = 0; c < rows.size(); ++c) {
    if (c + 1 == rows.size())
      return ready(c);
    float* next = chunk(c + 1);
    auto task = make_task(log_[logged_ - 1], next);
    auto reply = self_->request(shard_, timeout_, atom, task);
    const auto t0 = clock_type::now();
    auto sent = ready(c);
    const double sending =
      std::chrono::duration<double>(clock_type::now() - t0).count();
    auto computed = await_reply(reply);
    // Overlap: the part of the send that the shard spent computing.
    overlapped_s += std::min(sending, task->seconds);
    if (!sent.ok())
      return sent;
    if (!computed.ok()) {
      TUTTI_RETURN_IF_ERROR(recover(computed.message(), true));
      TUTTI_RETURN_IF_ERROR(run_logged(next));
    }
  }
  return {};
}

status shard_executor::forward_chunks(
  int64_t layer, const float* x, float* y, int64_t hidden,
  const std::vector<std::vector<int64_t>>& rows,
  const std::function<status(size_t)>& ready, double& overlapped_s) {
  return pipeline(expert_fwd_atom_v, layer, x, y, hidden, rows, ready,
                  overlapped_s);
}

status shard_executor::backward_chunks(
  int64_t layer, const float* dy, float* dx, int64_t hidden,
  const std::vector<std::vector<int64_t>>& rows,
  const std::function<status(size_t)>& ready, double& overlapped_s) {
  return pipeline(expert_bwd_atom_v, layer, dy, dx, hidden, rows, ready,
                  overlapped_s);
}

// After the backward pass the gradients are complete and kept across a
// restart, and after the optimizer step the live state is the step-start
// snapshot: these need no replay.
status shard_executor::grads(grad_view& out) {
  return with_restarts(false, [&] { return fetch(out, grads_atom_v); });
}

status shard_executor::optimize(const optimizer_args& args) {
  return with_restarts(false, [&] { return ask(optimize_atom_v, args); });
}

status shard_executor::snapshot(int64_t step, rank_snapshot_ptr& out) {
  return with_restarts(false,
                       [&] { return fetch(out, snapshot_atom_v, step); });
}

status shard_executor::restore(rank_snapshot_ptr snap) {
  auto s = ask(restore_atom_v, std::move(snap));
  return s.ok() ? s : status::error("expert shard: " + s.message());
}

status shard_executor::recover(const std::string& why, bool replay) {
  const auto t0 = clock_type::now();
  const auto dead = shard_.address();
  // The supervisor restarts the shard when it sees the down message, which
  // may be just after our error: poll briefly for a new handle.
  const auto deadline = t0 + timeout_;
  for (;;) {
    if (aborted_ && aborted_())
      return status::error("aborted while the expert shard restarted");
    status found = connect();
    if (!found.ok() && clock_type::now() >= deadline)
      return status::error("expert shard failed (" + why
                           + ") and was not restarted: " + found.message());
    if (found.ok() && shard_.address() != dead)
      break;
    if (clock_type::now() >= deadline)
      return status::error("expert shard failed (" + why
                           + ") and was not restarted in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  size_t replayed = 0;
  if (replay && !replayable_) // not expected: its supervision restarts none
    return status::error("expert shard restarted after " + why
                         + ", but the step's inputs were not kept to replay");
  if (replay) {
    TUTTI_RETURN_IF_ERROR(ask(zero_grads_atom_v));
    kernels::tensor<float> scratch;
    for (size_t i = 0; i + 1 < logged_; ++i) {
      scratch.resize(stream_, static_cast<size_t>(
                                std::max<int64_t>(log_[i].rows, 1) * hidden_));
      TUTTI_RETURN_IF_ERROR(send_task(log_[i], scratch.data()));
      ++replayed;
    }
  }
  const double took =
    std::chrono::duration<double>(clock_type::now() - t0).count();
  if (on_restart_)
    on_restart_(took, replayed);
  return {};
}

} // namespace tutti
