#include "rank/rank_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <thread>

#include "rank/rank_checkpoint.hpp"
#include "rank/link_traffic.hpp"
#include "rank/rank_setup.hpp"
#include "rank/replica_exchange.hpp"
#include "rank/routing_window.hpp"
#include "shard/shard_executor.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/base/core_pinning.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/blas_core.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/capacity_plan.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/moe/rack_routing.hpp"
#include "tutti/train/rank_model.hpp"
#include "tutti/train/stage_layout.hpp"
#include "tutti/train/tensor_parallel.hpp"
#include "tutti/protocol/errors.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti {

namespace {

// train.gemm_precision bf16 on the CPU, said once a job: what runs it.
std::string cpu_bf16_note(const job_config& cfg) {
  if (cfg.train.gemm_precision != gemm_precision::bf16
      || cfg.cluster.device != compute_device::cpu)
    return "";
  const auto bf16 = kernels::cpu_bf16_support();
  return bf16.runs_bf16
           ? std::string("; bf16 GEMMs on oneDNN ") + bf16.isa
           : std::string("; train.gemm_precision bf16: this CPU has no bf16 "
                         "units (oneDNN: ")
               + bf16.isa + "), the GEMMs run in float32";
}

using clock_type = std::chrono::steady_clock;

// Requests ride the step's all-reduce as one sum (exact in a double): a
// count of stop votes, of checkpoint votes times 2^17 and of pause votes
// times 2^34 (up to 2^17 ranks each).
constexpr int64_t checkpoint_vote = int64_t{1} << 17;
constexpr int64_t pause_vote = int64_t{1} << 34;

struct step_votes {
  bool stop = false, checkpoint = false, pause = false;
};

step_votes decode_votes(double sum) {
  const auto v = static_cast<int64_t>(std::llround(sum));
  return {(v % checkpoint_vote) > 0,
          ((v / checkpoint_vote) % (pause_vote / checkpoint_vote)) > 0,
          (v / pause_vote) > 0};
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The running child `id` of a supervisor (again after a restart).
template <class Handle>
status find_child(caf::blocking_actor* self, const supervisor_actor& sup,
                  const std::string& id, std::chrono::milliseconds timeout,
                  Handle& out) {
  status result;
  self->request(sup, timeout, which_child_atom_v, id)
    .receive([&](caf::actor& h) { out = caf::actor_cast<Handle>(h); },
             [&](caf::error& err) {
               result = status::error(id + ": " + self->system().render(err));
             });
  return result;
}

class step_loop {
public:
  step_loop(caf::blocking_actor* self, rank_args& a)
    : self_(self), a_(a),
      timeout_(std::chrono::milliseconds(a.cfg.cluster.collective_timeout_ms)) {
  }

  // The communicators die with the loop: nothing may abort them after.
  ~step_loop() { a_.control->clear(); }

  // Device failures (kernels::device_error) end the rank with their
  // message, like any other error.
  status run() {
    try {
      return run_steps();
    } catch (const std::exception& ex) {
      return status::error(ex.what());
    }
  }

  status run_steps() {
    if (!a_.placement_error.empty())
      return status::error(a_.placement_error);
    const int device = rank_device(a_.cfg, a_.rank);
    if (device >= 0) {
      kernels::cuda_set_device(device); // this thread's, for good
      device_stream_ = std::make_unique<kernels::device_stream>(
        gemm_precision_of(a_.cfg));
      stream_ = device_stream_->get();
    } else {
      stream_.gemm = gemm_precision_of(a_.cfg); // the CPU's bf16 GEMMs
    }
    collectives_ = std::make_unique<moe::staged_collectives>(stream_);
    TUTTI_RETURN_IF_ERROR(connect(self_->system(), a_, device, comms_));
    TUTTI_RETURN_IF_ERROR(
      find_child(self_, a_.loaders, loader_id(), timeout_, loader_));
    shard_executor experts(
      self_, stream_, a_.experts, "expert_shard/" + std::to_string(a_.rank),
      a_.cfg.model.hidden_size, a_.cfg.experts_per_rank(), timeout_,
      a_.cfg.expert_restart_in_place(),
      [this](double seconds, size_t replayed) {
        on_shard_restart(seconds, replayed);
      },
      [this] { return a_.control->aborted(); });
    TUTTI_RETURN_IF_ERROR(experts.connect());
    experts_ = &experts;
    train::rank_model model(a_.cfg, comms_.groups(), experts, stream_,
                            a_.slot_of_expert);
    if (a_.rank == 0) {
      const auto& e = a_.cfg.moe;
      const auto bytes = e.communication_buffer_size > 0
                           ? e.communication_buffer_size
                           : train::dispatch_buffer_rows(a_.cfg)
                               * a_.cfg.model.hidden_size
                               * static_cast<int64_t>(sizeof(float));
      log_info("rank",
               "dispatch buffers: " + std::to_string(bytes)
                 + " bytes per rank ("
                 + (e.communication_buffer_size > 0 ? "configured"
                    : e.capacity_factor > 0         ? "auto: from capacity"
                                            : "auto: dropless worst case")
                 + "); CPU kernels on OpenBLAS core "
                 + kernels::blas_core_name() + cpu_bf16_note(a_.cfg)
                 + moe::rack_routing_note(
                   a_.cfg, moe::rack_routing_of(a_.cfg, a_.rank,
                                                a_.slot_of_expert)));
    }
    if (a_.resume_step > 0) {
      TUTTI_RETURN_IF_ERROR(
        restore_snapshot(a_, model, experts, a_.resume_step));
      if (a_.rank == 0)
        log_info("rank", "resumed from the checkpoint of step "
                           + std::to_string(a_.resume_step));
    }
    const auto& t = a_.cfg.train;
    last_step_ = a_.resume_step;
    for (int64_t step = a_.resume_step + 1; step <= t.steps; ++step) {
      poll_mailbox();
      TUTTI_RETURN_IF_ERROR(injected_faults());
      step_ = step;
      step_report report;
      report.epoch = a_.epoch;
      step_votes votes;
      TUTTI_RETURN_IF_ERROR(train(model, step, report, votes));
      const bool stop = votes.stop;
      const bool eval = step == t.steps || stop
                        || (t.eval_interval > 0 && step % t.eval_interval == 0);
      if (eval && t.eval_sequences > 0) {
        TUTTI_RETURN_IF_ERROR(evaluate(model, report.eval_loss));
        report.evaluated = true;
        final_eval_loss_ = report.eval_loss;
      }
      last_step_ = step;
      const auto& ck = a_.cfg.checkpoint;
      rank_snapshot_ptr snap;
      if (step == t.steps || stop || votes.checkpoint
          || (ck.interval_steps > 0 && step % ck.interval_steps == 0)) {
        // The copy to host memory is the only stall; the writer persists
        // it while training goes on.
        const auto t0 = clock_type::now();
        TUTTI_RETURN_IF_ERROR(take_snapshot(a_, model, experts, step, snap));
        auto dir = std::filesystem::path(ck.root(a_.cfg.run))
                   / store::checkpoint_dir_name(step);
        // Queued with the node first: a writer that crashes before it gets
        // to this one leaves it to its successor.
        a_.checkpoint_writes->add(snap, dir.string());
        checkpoint_writer_actor writer;
        for (int attempt = 0;; ++attempt) {
          auto found = find_child(self_, a_.writers, "checkpoint_writer",
                                  timeout_, writer);
          if (found.ok())
            break;
          if (attempt == 50 || a_.control->aborted())
            return found;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        self_->send(writer, ckpt_write_atom_v, snap, dir.string());
        report.time_other_s += seconds_since(t0);
        report.step_time_s += seconds_since(t0);
      }
      const auto every = a_.cfg.elastic.replica_interval_steps;
      const bool copies = every > 0 && a_.replicas;
      if (copies) {
        // The state a recovery resumes from instead of the checkpoint: the
        // stall is the snapshot and a previous copy still travelling; this
        // one travels during the next step.
        const auto t0 = clock_type::now();
        TUTTI_RETURN_IF_ERROR(copier_.poll());
        if (step % every == 0) {
          if (!snap)
            TUTTI_RETURN_IF_ERROR(
              take_snapshot(a_, model, experts, step, snap));
          TUTTI_RETURN_IF_ERROR(copier_.start(
            {comms_.replica_out.get(), comms_.replica_in.get()},
            std::move(snap)));
        }
        report.time_replica_s = seconds_since(t0);
        report.time_other_s += report.time_replica_s;
        report.step_time_s += report.time_replica_s;
        copier_.report(std::move(report)); // once its copy has landed
      } else {
        self_->send(a_.coordinator, std::move(report));
      }
      if (stop)
        break;
      if (votes.pause) {
        TUTTI_RETURN_IF_ERROR(copier_.wait()); // its reports go first
        TUTTI_RETURN_IF_ERROR(wait_while_paused());
      }
    }
    return copier_.wait();
  }

  double final_eval_loss() const { return final_eval_loss_; }
  int64_t last_step() const { return last_step_; }

private:
  std::string loader_id() const {
    return "data_loader/" + std::to_string(a_.rank);
  }

  // A batch from the loader; a loader that failed is looked up again
  // (its supervisor restarts it; batches are a pure function of the index).
  template <class Atom>
  status fetch_batch(Atom atom, int64_t index, token_batch_ptr& out) {
    status result;
    for (int attempt = 0; attempt < 3; ++attempt) {
      result = {};
      self_->request(loader_, timeout_, atom, index)
        .receive([&](token_batch_ptr& b) { out = std::move(b); },
                 [&](caf::error& err) {
                   result = status::error("data loader: "
                                          + self_->system().render(err));
                 });
      if (result.ok() || a_.control->aborted())
        return result;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto dead = loader_.address();
      if (!find_child(self_, a_.loaders, loader_id(), timeout_, loader_).ok()
          || loader_.address() == dead)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return result;
  }

  void on_shard_restart(double seconds, size_t replayed) {
    auto text = "rank " + std::to_string(a_.rank)
                + ": expert shard restarted in place at step "
                + std::to_string(step_) + ", " + std::to_string(replayed)
                + " expert calls replayed";
    log_warn("rank", text + " (" + std::to_string(seconds) + " s)");
    self_->send(a_.coordinator, job_event{"replayed", text, seconds});
  }

  // kill_rank: an exception ends the rank's thread like a crash would.
  // hang_rank: stop before the step's first collective until aborted (the
  // peers wait in that collective).
  status injected_faults() {
    auto& c = *a_.control;
    if (c.crash.exchange(false))
      throw std::runtime_error("rank " + std::to_string(a_.rank)
                               + " crashed (injected fault kill_rank)");
    if (c.hang.exchange(false)) {
      log_warn("rank", "rank " + std::to_string(a_.rank)
                         + ": hanging (injected) until aborted");
      while (!c.aborted())
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (c.aborted())
      return status::error("aborted");
    return {};
  }

  // Takes control messages without waiting: a stop request becomes this
  // rank's vote in the next step's all-reduce.
  void poll_mailbox() {
    bool more = true;
    while (more)
      self_->receive([&](stop_atom) { stop_requested_ = true; },
                     [&](mailbox_atom) {
                       return static_cast<int64_t>(self_->mailbox().size());
                     },
                     caf::after(std::chrono::seconds(0)) >>
                       [&] { more = false; });
  }

  // Every rank stopped after the same step; no collective is in flight, so
  // no timeout runs. Ends on resume, stop (voted at the next step) or abort.
  status wait_while_paused() {
    auto& c = *a_.control;
    c.paused = true;
    if (a_.rank == 0)
      log_info("rank", "paused after step " + std::to_string(step_));
    while (!c.resume.exchange(false) && !stop_requested_) {
      if (c.aborted()) {
        c.paused = false;
        return status::error("aborted");
      }
      poll_mailbox();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    c.paused = false;
    if (a_.rank == 0)
      log_info("rank", "resumed after step " + std::to_string(step_));
    return {};
  }

  status train(train::rank_model& model, int64_t step, step_report& r,
               step_votes& votes) {
    const auto t0 = clock_type::now();
    // slow_rank: time this rank loses outside collectives, as a straggler's.
    if (double s = a_.control->slow_s.load(); s > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
    token_batch_ptr batch;
    const auto fetch_start = clock_type::now();
    TUTTI_RETURN_IF_ERROR(fetch_batch(next_batch_atom_v, step, batch));
    const auto work_start = clock_type::now();
    r.time_data_s = seconds_since(fetch_start);
    experts_->begin_step();
    train::step_stats stats;
    auto& c = *a_.control;
    stats.stop_votes = static_cast<double>(
      (stop_requested_ ? 1 : 0)
      + (c.checkpoint_requested.exchange(false) ? checkpoint_vote : 0)
      + (c.pause_requested.exchange(false) ? pause_vote : 0));
    // Routing statistics count every layer of a token on one rank; a
    // pipeline stage sees only its own layers (not collected yet).
    stats.routing_ids = a_.cfg.pp_size() > 1 ? nullptr
                                              : routing_.ids_for_step();
    TUTTI_RETURN_IF_ERROR(model.train_step(
      batch->inputs.data(), batch->targets.data(), batch->seqs, stats));
    TUTTI_RETURN_IF_ERROR(routing_.after_step(step, *comms_.groups().dp,
                                              a_.rank == 0, r.routing_window));
    double dense_sq = 0, expert_sq = 0;
    TUTTI_RETURN_IF_ERROR(model.reduce_dense_grads(dense_sq, stats.time));
    TUTTI_RETURN_IF_ERROR(reduce_expert_grads(expert_sq, stats.time));
    stats.grad_norm = std::sqrt(dense_sq + expert_sq);
    const double clip = a_.cfg.train.grad_clip;
    const double scale = clip > 0 && stats.grad_norm > clip
                           ? clip / (stats.grad_norm + 1e-6)
                           : 1.0;
    stats.lr = train::learning_rate(a_.cfg.train, step);
    TUTTI_RETURN_IF_ERROR(model.apply_optimizer(step, stats.lr, scale));
    TUTTI_RETURN_IF_ERROR(optimize_experts(step, stats.lr, scale));
    votes = decode_votes(stats.stop_votes);
    // Decided for every rank by this step's vote: a request that reached
    // this rank too late for it must not act again next step.
    if (votes.pause)
      c.pause_requested = false;
    if (votes.checkpoint)
      c.checkpoint_requested = false;
    const double work = seconds_since(work_start);
    const double total = seconds_since(t0);

    r.step = step;
    r.rank = a_.rank;
    r.loss = stats.loss;
    r.aux_loss = stats.aux_loss;
    r.z_loss = stats.z_loss;
    r.grad_norm = stats.grad_norm;
    r.lr = stats.lr;
    r.tokens = stats.tokens;
    r.dropped_tokens = stats.dropped_tokens;
    r.alltoall_bytes = stats.alltoall_bytes;
    r.alltoall_bytes_by_link = bytes_by_link(a_.cfg, a_.rank,
                                             stats.alltoall_bytes_to);
    r.expert_counts = std::move(stats.expert_counts);
    if (a_.rank == 0) {
      const auto bias = model.router_bias().to_host(stream_);
      r.router_bias.assign(bias.begin(), bias.end());
    }
    r.time_alltoall_s = stats.time.alltoall_s;
    r.time_overlap_s = stats.time.overlap_s;
    r.time_alltoall_wait_s = stats.time.alltoall_wait_s;
    r.time_lent_s = stats.time.lent_s;
    r.time_allreduce_s = stats.time.allreduce_s;
    r.time_pipeline_s = stats.time.pipeline_s;
    r.time_pipeline_schedule_s = stats.time.pipeline_schedule_s;
    r.pipeline_bubble = stats.time.pipeline_bubble;
    r.time_compute_s = std::max(0.0, work - stats.time.alltoall_s
                                       - stats.time.allreduce_s);
    r.time_other_s = std::max(0.0, total - work);
    r.step_time_s = total;
    return {};
  }

  // The experts' part of the gradient norm, summed per expert and then
  // over experts in id order: the same bits whichever rank holds which
  // expert (a placement moves them; the clipping factor must not move).
  status reduce_expert_grads(double& sum_squares, train::step_timers& time) {
    grad_view grads;
    TUTTI_RETURN_IF_ERROR(experts_->grads(grads));
    // The shard is idle until our next request: its buffer (on our
    // device) is ours to reduce in place.
    if (comms_.expert_dp) {
      train::scoped_timer t(time.allreduce_s);
      TUTTI_RETURN_IF_ERROR(collectives_->all_reduce_sum(
        *comms_.expert_dp, grads.data, static_cast<size_t>(grads.size)));
    }
    const auto& c = a_.cfg;
    const int64_t L = c.model.num_hidden_layers, E = c.moe.num_experts;
    const int64_t count = c.experts_per_rank();
    // The shard holds its pipeline stage's layers only.
    const auto layers = train::layers_of_stage(c, c.pp_stage_of(a_.rank));
    if (expert_layout_.tensors().empty())
      expert_layout_ = train::tp_local_layout(
        train::expert_layout_of_layers(c.model, count, layers), c.tp_size());
    // Zeros but at this rank's experts; the EP sum (and the stages' sum)
    // then adds each expert's value to zeros only, which is exact.
    std::vector<double> per_expert(L * E, 0.0);
    for (int64_t l : layers.list())
      for (int64_t j = 0; j < count; ++j) {
        double sum = 0;
        for (const char* w : {"w1", "w3", "w2"}) {
          const auto& block = expert_layout_.at(model::expert_block_name(l, w));
          const int64_t per = block.numel / count;
          sum += kernels::sum_squares(stream_,
                                      grads.data + block.offset + j * per, per);
        }
        per_expert[l * E + expert_id(l, j)] = sum;
      }
    // Each TP rank has its slice of every expert's squares.
    if (comms_.tp) {
      train::scoped_timer t(time.allreduce_s);
      TUTTI_RETURN_IF_ERROR(comms_.tp->all_reduce_sum(per_expert.data(),
                                                      per_expert.size()));
    }
    auto* ep = comms_.groups().ep;
    if (ep->size() > 1) {
      train::scoped_timer t(time.allreduce_s);
      TUTTI_RETURN_IF_ERROR(ep->all_reduce_sum(per_expert.data(),
                                               per_expert.size()));
    }
    if (auto* pp = comms_.groups().pp) {
      train::scoped_timer t(time.allreduce_s);
      TUTTI_RETURN_IF_ERROR(pp->all_reduce_sum(per_expert.data(),
                                               per_expert.size()));
    }
    sum_squares = 0;
    for (double v : per_expert)
      sum_squares += v;
    return {};
  }

  // The expert in row j of this rank's layer-l blocks.
  int32_t expert_id(int64_t l, int64_t j) const {
    const int64_t count = a_.cfg.experts_per_rank();
    if (!a_.expert_ids.empty())
      return a_.expert_ids[l * count + j];
    return static_cast<int32_t>(a_.cfg.ep_member_of(a_.rank) * count + j);
  }

  status optimize_experts(int64_t step, double lr, double scale) {
    return experts_->optimize(optimizer_args{step, lr, scale});
  }

  status evaluate(train::rank_model& model, double& eval_loss) {
    const auto& t = a_.cfg.train;
    const int64_t per_rank = t.eval_sequences / a_.cfg.dp_size();
    const int64_t chunk = t.global_batch_size / a_.cfg.dp_size();
    double loss_sum = 0;
    int64_t tokens = 0;
    train::step_timers unused;
    for (int64_t c = 0; c * chunk < per_rank; ++c) {
      token_batch_ptr batch;
      TUTTI_RETURN_IF_ERROR(fetch_batch(eval_batch_atom_v, c, batch));
      double sum = 0;
      int64_t n = 0;
      TUTTI_RETURN_IF_ERROR(model.evaluate(batch->inputs.data(),
                                           batch->targets.data(), batch->seqs,
                                           sum, n, unused));
      loss_sum += sum;
      tokens += n;
    }
    eval_loss = tokens > 0 ? loss_sum / static_cast<double>(tokens)
                           : std::numeric_limits<double>::quiet_NaN();
    return {};
  }

  caf::blocking_actor* self_;
  rank_args& a_;
  std::chrono::milliseconds timeout_;
  rank_comms comms_;
  data_loader_actor loader_;
  shard_executor* experts_ = nullptr;
  // Where the model computes: the CPU, or this rank's GPU and its stream.
  std::unique_ptr<kernels::device_stream> device_stream_;
  kernels::stream stream_ = kernels::cpu_stream();
  std::unique_ptr<moe::staged_collectives> collectives_;
  int64_t step_ = 0;
  double final_eval_loss_ = std::numeric_limits<double>::quiet_NaN();
  int64_t last_step_ = 0;
  bool stop_requested_ = false;
  routing_window routing_{a_.cfg};
  model::param_layout expert_layout_; // of the shard's blocks
  // Declared after comms_: it ends (and aborts a copy in flight) first.
  // Its thread sends the reports of copied steps, so without a sender.
  replica_copier copier_{a_, a_.resume_step,
                         [coordinator = a_.coordinator](step_report&& r) {
                           caf::anon_send(coordinator, std::move(r));
                         }};
};

void rank_main(caf::blocking_actor* self, rank_args args) {
  kernels::use_single_threaded_blas();
  if (args.cfg.cluster.device != compute_device::cuda
      && args.cfg.cluster.pin_rank_cores && args.memory_hub)
    pin_to_rank_core(args.rank - args.memory_hub->first_rank(),
                     args.memory_hub->rank_count());
  step_loop loop(self, args);
  auto result = loop.run();
  if (!result.ok() && args.control->aborted()) {
    // Recovery ended this epoch; failing collectives are expected.
    log_info("rank", "rank " + std::to_string(args.rank) + " of epoch "
                       + std::to_string(args.epoch) + " aborted");
    return;
  }
  if (!result.ok()) {
    log_error("rank", "rank " + std::to_string(args.rank)
                        + " failed: " + result.message());
    self->send(args.coordinator,
               rank_failed{args.rank, result.message(), args.epoch});
    self->fail_state(caf::make_error(errc::rank_failed, result.message()));
    return;
  }
  self->send(args.coordinator,
             rank_done{args.rank, loop.last_step(), loop.final_eval_loss()});
}

} // namespace

// Best effort: a communicator that cannot be aborted is reported and the
// others still are; the recovery that asked goes on either way.
void abort_logged(comm::communicator* c) {
  if (auto aborted = c->abort(); !aborted)
    log_warn("rank", "communicator abort: " + aborted.message());
}

void rank_control::abort() {
  std::lock_guard<std::mutex> guard(mutex_);
  aborted_ = true;
  for (auto* c : comms_)
    abort_logged(c);
}

void rank_control::add(comm::communicator* c) {
  std::lock_guard<std::mutex> guard(mutex_);
  comms_.push_back(c);
  if (aborted_)
    abort_logged(c);
}

void rank_control::clear() {
  std::lock_guard<std::mutex> guard(mutex_);
  comms_.clear();
}

caf::actor spawn_rank(caf::actor_system& sys, rank_args args) {
  return sys.spawn<caf::detached>(rank_main, std::move(args));
}

} // namespace tutti
