#pragma once
// The rank's side of its expert shard: each MoE block's expert work is one
// request to the shard actor, answered before the rank goes on.
//
// Restart in place: the executor logs the step's expert work (inputs are
// copied). When the shard fails, its supervisor restarts it from the
// step-start snapshot; the executor fetches the new handle, replays the
// logged work into scratch buffers (rebuilding activations and gradients
// bit for bit) and retries the failed request. The other ranks meanwhile
// wait in the step's next collective, well inside its timeout. A job whose
// shards may not restart (job_config::expert_restart_in_place) logs no
// inputs: the shard reads the rank's own buffers.

#include <caf/blocking_actor.hpp>

#include <functional>
#include <string>
#include <vector>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/runtime/supervisor.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/train/expert_executor.hpp"

namespace tutti {

class shard_executor final : public train::expert_executor {
public:
  // `on_restart(seconds, replayed)` is told of each restart survived;
  // `aborted()` ends waiting for one (the rank's epoch is over). `stream`:
  // the rank's, where the logged inputs are copied (device memory on a GPU).
  shard_executor(caf::blocking_actor* self, kernels::stream stream,
                 supervisor_actor experts, std::string child_id, int64_t hidden,
                 int64_t local_experts, std::chrono::milliseconds timeout,
                 bool replayable,
                 std::function<void(double, size_t)> on_restart,
                 std::function<bool()> aborted);

  // Finds the shard; then a new step: the log starts empty.
  status connect();
  // Entries (and their device memory) are reused from step to step:
  // freeing device memory synchronizes the whole device, which must not
  // happen under a peer's NCCL kernel.
  void begin_step() { logged_ = 0; }

  status forward(int64_t layer, const float* x, const int64_t* rows, int64_t m,
                 float* y, bool append) override;
  status forward_chunks(int64_t layer, const float* x, float* y, int64_t hidden,
                        const std::vector<std::vector<int64_t>>& rows,
                        const std::function<status(size_t)>& ready,
                        double& overlapped_s) override;
  status backward(int64_t layer, const float* dy, int64_t m, float* dx,
                  const int64_t* rows, int64_t first_row) override;
  status backward_chunks(int64_t layer, const float* dy, float* dx,
                         int64_t hidden,
                         const std::vector<std::vector<int64_t>>& rows,
                         const std::function<status(size_t)>& ready,
                         double& overlapped_s) override;
  status grads(grad_view& out);
  status optimize(const optimizer_args& args);
  status snapshot(int64_t step, rank_snapshot_ptr& out);
  status restore(rank_snapshot_ptr snap);

  expert_shard_actor handle() const { return shard_; }

private:
  struct logged_task {
    bool forward = true;
    bool append = false;
    bool last_chunk = true;
    int64_t first_row = 0;
    int64_t layer = 0;
    kernels::tensor<float> input;    // the copy, when replayable
    const float* borrowed = nullptr; // else the rank's buffer
    std::vector<int64_t> rows_per_expert;
    int64_t rows = 0;
    int64_t slot = 0;
  };

  logged_task& next_entry();
  void log_task(bool forward, int64_t layer, const float* in, int64_t m,
                const int64_t* rows, bool append, int64_t first_row);
  template <class Atom>
  status pipeline(Atom atom, int64_t layer, const float* in, float* out,
                  int64_t hidden, const std::vector<std::vector<int64_t>>& rows,
                  const std::function<status(size_t)>& ready,
                  double& overlapped_s);
  expert_task_ptr make_task(const logged_task& t, float* output) const;
  status run_logged(float* output);
  template <class Handle>
  status await_reply(Handle& reply);
  status send_task(const logged_task& t, float* output);
  // Waits for the supervisor's restarted shard, then replays the log but
  // its last entry. `replay`: false after the backward pass (gradients are
  // complete and kept; activations are no longer needed).
  status recover(const std::string& why, bool replay);
  template <class... Ts>
  status ask(Ts&&... xs);
  // A request whose answer is a value (gradients, a snapshot).
  template <class T, class... Ts>
  status fetch(T& out, Ts&&... xs);
  // Runs `once` until it succeeds, a restarted shard between attempts.
  template <class F>
  status with_restarts(bool replay, F&& once);

  caf::blocking_actor* self_;
  kernels::stream stream_;
  supervisor_actor experts_;
  std::string child_id_;
  std::chrono::milliseconds timeout_;
  std::function<void(double, size_t)> on_restart_;
  std::function<bool()> aborted_;
  expert_shard_actor shard_;
  std::vector<logged_task> log_; // the step's: the first logged_
  size_t logged_ = 0;
  int64_t hidden_ = 0;
  int64_t local_experts_ = 0;
  bool replayable_ = true;
};

} // namespace tutti
