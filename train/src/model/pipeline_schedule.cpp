// Pipeline parallelism (cluster_config.pipeline_model_parallel_size):
// Megatron's 1F1B schedule over this stage's layers, the exchanges with
// the neighbouring stages, and the step's sums over the stages.
//
// Stage s of p runs min(p - s - 1, m) warm-up forwards, then alternates
// one forward and one backward, then cools down with the backwards left.
// Every exchange is a two-member all_to_all_v on the link between two
// stages, and the schedule pairs them: where one side sends its forward
// output and takes the gradient back, the other sends its gradient and
// takes the next input (Megatron's send_forward_recv_backward and
// send_backward_recv_forward), so neither waits on a send the other has not
// reached. Gradients accumulate micro-batch by micro-batch in order, as on
// one stage, and each parameter lives on one stage: the gradients, and so
// the losses, are the one-stage run's bits.

#include <algorithm>

#include "tutti/train/rank_model.hpp"

#include "tutti/kernels/ops.hpp"

namespace tutti::train {

status rank_model::link_exchange(comm::communicator* link, const float* send,
                                 float* recv, int64_t count,
                                 step_timers& time) {
  // Member 0 of a link is the earlier stage.
  const int peer = link->rank() == 0 ? 1 : 0;
  std::vector<int64_t> send_counts(2, 0), recv_counts(2, 0);
  send_counts[peer] = send ? count : 0;
  recv_counts[peer] = recv ? count : 0;
  kernels::wait(stream_); // queued kernels wrote `send`
  scoped_timer t(time.pipeline_s);
  return collectives_.all_to_all_v(*link, send ? send : dx_.data(),
                                   send_counts, recv ? recv : dx_.data(),
                                   recv_counts);
}

status rank_model::pipeline_step(const int32_t* inputs, const int32_t* targets,
                                 step_stats& stats, double& ce_sum) {
  const int64_t m = cfg_.train.micro_batches;
  const int64_t warmup = std::min(stages_ - stage_ - 1, m);
  const int64_t steady = m - warmup;
  const int64_t tokens = micro_seqs_ * cfg_.train.seq_len;
  const int64_t width = tokens * cfg_.model.hidden_size;
  auto& time = stats.time;
  std::fill(aux_terms_.begin(), aux_terms_.end(), 0.0);
  std::fill(z_terms_.begin(), z_terms_.end(), 0.0);
  dx_.resize(stream_, width);
  // The current slot's boundary activations: received input, sent output.
  auto input = [&] { return acts_[chunk().first].x_in.data(); };
  auto output = [&] { return acts_[chunk().last].x_in.data(); };
  auto forward_one = [&](int64_t i) -> status {
    use_slot(i);
    micro_ = i;
    double ce = 0;
    TUTTI_RETURN_IF_ERROR(forward(inputs + i * tokens, targets + i * tokens,
                                  micro_seqs_, ce, &stats, time));
    ce_sum += ce; // in micro-batch order, as on one stage
    return {};
  };
  auto backward_one = [&](int64_t j) -> status {
    use_slot(j);
    micro_ = j;
    return backward(micro_seqs_, time);
  };
  auto* prev = comms_.prev;
  auto* next = comms_.next;

  for (int64_t i = 0; i < warmup; ++i) {
    use_slot(i);
    if (prev)
      TUTTI_RETURN_IF_ERROR(link_exchange(prev, nullptr, input(), width, time));
    TUTTI_RETURN_IF_ERROR(forward_one(i));
    if (next)
      TUTTI_RETURN_IF_ERROR(link_exchange(next, output(), nullptr, width, time));
  }
  if (steady > 0 && prev) {
    use_slot(warmup);
    TUTTI_RETURN_IF_ERROR(link_exchange(prev, nullptr, input(), width, time));
  }
  for (int64_t j = 0; j < steady; ++j) {
    const int64_t i = warmup + j;
    TUTTI_RETURN_IF_ERROR(forward_one(i));
    if (next) // send i's output, take j's gradient
      TUTTI_RETURN_IF_ERROR(link_exchange(next, output(), dx_.data(), width,
                                          time));
    TUTTI_RETURN_IF_ERROR(backward_one(j));
    if (!prev)
      continue;
    if (j + 1 == steady) {
      TUTTI_RETURN_IF_ERROR(
        link_exchange(prev, dx_.data(), nullptr, width, time));
    } else { // send j's input gradient, take i+1's input
      use_slot(i + 1);
      TUTTI_RETURN_IF_ERROR(
        link_exchange(prev, dx_.data(), input(), width, time));
    }
  }
  for (int64_t j = steady; j < m; ++j) {
    if (next)
      TUTTI_RETURN_IF_ERROR(link_exchange(next, nullptr, dx_.data(), width,
                                          time));
    TUTTI_RETURN_IF_ERROR(backward_one(j));
    if (prev)
      TUTTI_RETURN_IF_ERROR(
        link_exchange(prev, dx_.data(), nullptr, width, time));
  }
  return {};
}

// What the one-stage step reports, from the stages' parts: each term is
// on one stage and zero on the others, so the sums over the stages are
// exact, and the router losses are then added in the one-stage order
// (micro-batch by micro-batch, layer by layer).
status rank_model::pipeline_sums(step_stats& stats, double& ce_sum) {
  const size_t terms = aux_terms_.size();
  // After the router terms: this stage's computing time (summed) and its
  // schedule's wall time (in its own slot), for the bubble.
  const size_t timing = 3 + 2 * terms;
  std::vector<double> sums(timing + 1 + static_cast<size_t>(stages_), 0.0);
  sums[0] = ce_sum;
  sums[1] = static_cast<double>(stats.dropped_tokens);
  sums[2] = stats.stop_votes;
  std::copy(aux_terms_.begin(), aux_terms_.end(), sums.begin() + 3);
  std::copy(z_terms_.begin(), z_terms_.end(), sums.begin() + 3 + terms);
  const auto& time = stats.time;
  sums[timing] = time.pipeline_schedule_s - time.pipeline_s;
  sums[timing + 1 + static_cast<size_t>(stage_)] = time.pipeline_schedule_s;
  const int64_t layers = cfg_.model.num_hidden_layers;
  const int64_t experts = cfg_.moe.num_experts;
  // Expert counts: the report's, and bias balancing's over the step.
  std::vector<int64_t> counts(stats.expert_counts);
  counts.resize(2 * layers * experts, 0);
  for (int64_t l : layers_.list())
    std::copy(counts_step_[l].begin(), counts_step_[l].end(),
              counts.begin() + (layers + l) * experts);
  {
    scoped_timer t(stats.time.allreduce_s);
    TUTTI_RETURN_IF_ERROR(comms_.pp->all_reduce_sum(sums.data(), sums.size()));
    TUTTI_RETURN_IF_ERROR(
      comms_.pp->all_reduce_sum(counts.data(), counts.size()));
  }
  ce_sum = sums[0];
  stats.dropped_tokens = static_cast<int64_t>(sums[1]);
  stats.stop_votes = sums[2];
  const double span =
    *std::max_element(sums.begin() + static_cast<int64_t>(timing) + 1,
                      sums.end());
  if (span > 0)
    stats.time.pipeline_bubble =
      1 - sums[timing] / (static_cast<double>(stages_) * span);
  stats.aux_loss = stats.z_loss = 0;
  for (size_t i = 0; i < terms; ++i) {
    stats.aux_loss += sums[3 + i];
    stats.z_loss += sums[3 + terms + i];
  }
  std::copy(counts.begin(), counts.begin() + layers * experts,
            stats.expert_counts.begin());
  for (int64_t l = 0; l < layers; ++l) {
    std::copy(counts.begin() + (layers + l) * experts,
              counts.begin() + (layers + l + 1) * experts,
              counts_step_[l].begin());
    counts_step_dev_[l].upload(stream_, counts_step_[l]);
  }
  return {};
}

// Evaluation: forwards only, micro-batch by micro-batch through the
// stages; the cross-entropy of the last stage summed over the stages
// (zeros elsewhere, exact).
status rank_model::pipeline_evaluate(const int32_t* inputs,
                                     const int32_t* targets, int64_t seqs,
                                     double& ce_sum, int64_t& tokens,
                                     step_timers& time) {
  const int64_t s = cfg_.train.seq_len, d = cfg_.model.hidden_size;
  ce_sum = 0;
  tokens = 0;
  use_slot(0);
  for (int64_t first = 0; first < seqs; first += micro_seqs_) {
    const int64_t count = std::min(micro_seqs_, seqs - first);
    const int64_t width = count * s * d;
    if (comms_.prev)
      TUTTI_RETURN_IF_ERROR(link_exchange(comms_.prev, nullptr,
                                          acts_[chunk().first].x_in.data(),
                                          width, time));
    double ce = 0;
    TUTTI_RETURN_IF_ERROR(forward(inputs + first * s, targets + first * s,
                                  count, ce, nullptr, time));
    if (comms_.next)
      TUTTI_RETURN_IF_ERROR(link_exchange(comms_.next,
                                          acts_[chunk().last].x_in.data(),
                                          nullptr, width, time));
    ce_sum += ce;
    tokens += global_tokens_;
  }
  scoped_timer t(time.allreduce_s);
  return comms_.pp->all_reduce_sum(&ce_sum, 1);
}

} // namespace tutti::train
