// Interleaved pipeline stages (cluster_config.pipeline_virtual_stages v):
// stage s of p holds model chunks s, s + p, ... of p v equal ones and runs
// Megatron's interleaved 1F1B (pipeline_order.hpp), which cuts the bubble
// v-fold. A chunk's output goes to the next stage (the last stage's to
// stage 0, for its next chunk), its input gradient to the previous one.
//
// The stages send and receive in different orders here, so the exchanges
// are point-to-point over the stages' group: a send is posted and left (its
// copy kept until the step's end), a receive waits for its message, named
// by direction, micro-batch and the virtual stage it goes to. Each
// parameter still lives on one stage and accumulates its micro-batches'
// gradients in micro-batch order (each chunk's backwards come in order),
// so the losses are the one-stage run's bits, as with plain 1F1B.

#include "tutti/train/rank_model.hpp"

#include "tutti/kernels/ops.hpp"
#include "tutti/train/pipeline_order.hpp"

namespace tutti::train {

namespace {

// A message's tag: activations (forward) or gradients into virtual stage
// `to` of micro-batch `micro`.
uint32_t stage_tag(bool forward, int64_t micro, int64_t to,
                   int64_t virtual_stages) {
  return static_cast<uint32_t>((micro * virtual_stages + to) * 2
                               + (forward ? 0 : 1));
}

} // namespace

status rank_model::send_to_stage(int peer, uint32_t tag, const float* data,
                                 int64_t count, step_timers& time) {
  kernels::wait(stream_); // queued kernels wrote `data`
  scoped_timer t(time.pipeline_s);
  sent_.emplace_back(data, data + count);
  return comms_.pp->send(peer, tag, sent_.back().data(),
                         static_cast<size_t>(count) * sizeof(float));
}

status rank_model::finish_sends(step_timers& time) {
  scoped_timer t(time.pipeline_s);
  auto received = comms_.pp->wait_sends();
  sent_.clear();
  return received;
}

status rank_model::interleaved_step(const int32_t* inputs,
                                    const int32_t* targets, step_stats& stats,
                                    double& ce_sum) {
  const int64_t m = cfg_.train.micro_batches, p = stages_;
  const int64_t v = static_cast<int64_t>(chunks()), all = p * v;
  const int64_t tokens = micro_seqs_ * cfg_.train.seq_len;
  const int64_t width = tokens * cfg_.model.hidden_size;
  const int prev = static_cast<int>((stage_ + p - 1) % p);
  const int next = static_cast<int>((stage_ + 1) % p);
  auto& time = stats.time;
  auto& pp = *comms_.pp;
  std::fill(aux_terms_.begin(), aux_terms_.end(), 0.0);
  std::fill(z_terms_.begin(), z_terms_.end(), 0.0);
  dx_.resize(stream_, width);
  auto receive = [&](int peer, uint32_t tag, float* into) {
    scoped_timer t(time.pipeline_s);
    return pp.recv(peer, tag, into,
                   static_cast<size_t>(width) * sizeof(float));
  };
  for (const auto& op : pipeline_order(p, v, m, stage_)) {
    use_slot(op.micro);
    micro_ = op.micro;
    chunk_ = op.chunk;
    const int64_t at = op.chunk * p + stage_; // the virtual stage
    if (op.forward) {
      if (at > 0)
        TUTTI_RETURN_IF_ERROR(receive(prev, stage_tag(true, op.micro, at, all),
                                      acts_[chunk().first].x_in.data()));
      double ce = 0;
      TUTTI_RETURN_IF_ERROR(forward(inputs + op.micro * tokens,
                                    targets + op.micro * tokens, micro_seqs_,
                                    ce, &stats, time));
      ce_sum += ce; // the last chunk's come in micro-batch order
      if (at + 1 < all)
        TUTTI_RETURN_IF_ERROR(send_to_stage(
          next, stage_tag(true, op.micro, at + 1, all),
          acts_[chunk().last].x_in.data(), width, time));
    } else {
      if (at + 1 < all)
        TUTTI_RETURN_IF_ERROR(receive(
          next, stage_tag(false, op.micro, at, all), dx_.data()));
      TUTTI_RETURN_IF_ERROR(backward(micro_seqs_, time));
      if (at > 0)
        TUTTI_RETURN_IF_ERROR(send_to_stage(
          prev, stage_tag(false, op.micro, at - 1, all), dx_.data(), width,
          time));
    }
  }
  chunk_ = 0;
  return finish_sends(time);
}

// Evaluation: each micro-batch through every chunk of every stage in
// turn; the cross-entropy of the last chunk summed over the stages.
status rank_model::interleaved_evaluate(const int32_t* inputs,
                                        const int32_t* targets, int64_t seqs,
                                        double& ce_sum, int64_t& tokens,
                                        step_timers& time) {
  const int64_t s = cfg_.train.seq_len, d = cfg_.model.hidden_size;
  const int64_t p = stages_, v = static_cast<int64_t>(chunks()), all = p * v;
  const int prev = static_cast<int>((stage_ + p - 1) % p);
  const int next = static_cast<int>((stage_ + 1) % p);
  auto& pp = *comms_.pp;
  ce_sum = 0;
  tokens = 0;
  use_slot(0);
  for (int64_t first = 0, micro = 0; first < seqs;
       first += micro_seqs_, ++micro) {
    const int64_t count = std::min(micro_seqs_, seqs - first);
    const int64_t width = count * s * d;
    for (chunk_ = 0; chunk_ < v; ++chunk_) {
      const int64_t at = chunk_ * p + stage_;
      if (at > 0) {
        scoped_timer t(time.pipeline_s);
        TUTTI_RETURN_IF_ERROR(pp.recv(
          prev, stage_tag(true, micro, at, all),
          acts_[chunk().first].x_in.data(),
          static_cast<size_t>(width) * sizeof(float)));
      }
      double ce = 0;
      TUTTI_RETURN_IF_ERROR(forward(inputs + first * s, targets + first * s,
                                    count, ce, nullptr, time));
      ce_sum += ce;
      if (at + 1 < all)
        TUTTI_RETURN_IF_ERROR(send_to_stage(next,
                                            stage_tag(true, micro, at + 1, all),
                                            acts_[chunk().last].x_in.data(),
                                            width, time));
    }
    tokens += global_tokens_;
  }
  chunk_ = 0;
  TUTTI_RETURN_IF_ERROR(finish_sends(time));
  scoped_timer t(time.allreduce_s);
  return comms_.pp->all_reduce_sum(&ce_sum, 1);
}

} // namespace tutti::train
