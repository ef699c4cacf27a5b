// The embedding and the LM head, vocab-parallel under tensor parallelism
// (Megatron's VocabParallelEmbedding and vocab-parallel cross-entropy):
// each TP rank holds a slice of the vocabulary's rows of both, so neither
// table is whole on any rank. Without TP these are the plain lookups and
// the plain loss, with the same bits as ever.

#include <algorithm>
#include <cmath>
#include <limits>

#include "tutti/kernels/ops.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

int64_t rank_model::select_vocab_rows(const int32_t* ids, int64_t n) {
  std::vector<int32_t> local;
  std::vector<int64_t> at;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= vocab_first_ && ids[i] < vocab_first_ + vocab_rows_) {
      local.push_back(static_cast<int32_t>(ids[i] - vocab_first_));
      at.push_back(i);
    }
  vocab_ids_.upload(stream_, local);
  vocab_at_.upload(stream_, at);
  return static_cast<int64_t>(at.size());
}

// Each token's row comes from the one TP rank whose slice holds it; the
// others give zeros, so the sum over the group is exact.
status rank_model::embed_forward(const int32_t* ids, int64_t n,
                                 step_timers& time) {
  const int64_t d = cfg_.model.hidden_size;
  float* x = acts_[0].x_in.data();
  if (!comms_.tp) {
    k::embedding_forward(stream_, inputs_.data(), param(names::embed), x, n,
                         d);
    return {};
  }
  const int64_t rows = select_vocab_rows(ids, n);
  k::fill_zero(stream_, x, n * d);
  if (rows > 0) {
    vocab_rows_buf_.resize(stream_, rows * d);
    k::embedding_forward(stream_, vocab_ids_.data(), param(names::embed),
                         vocab_rows_buf_.data(), rows, d);
    k::scatter_rows(stream_, vocab_rows_buf_.data(), vocab_at_.data(), x,
                    rows, d);
  }
  return tp_sum(x, n * d, time);
}

// The slice's rows of the table gradient, added in token order as the
// whole table's are: the same bits for those rows.
void rank_model::embed_backward(int64_t n) {
  const int64_t d = cfg_.model.hidden_size;
  if (!comms_.tp) {
    k::embedding_backward(stream_, inputs_.data(), dx_.data(),
                          grad(names::embed), n, d);
    return;
  }
  const auto ids = inputs_.to_host(stream_);
  const int64_t rows = select_vocab_rows(ids.data(), n);
  if (rows == 0)
    return;
  vocab_rows_buf_.resize(stream_, rows * d);
  k::gather_rows(stream_, dx_.data(), vocab_at_.data(), vocab_rows_buf_.data(),
                 rows, d);
  k::embedding_backward(stream_, vocab_ids_.data(), vocab_rows_buf_.data(),
                        grad(names::embed), rows, d);
}

// The loss from this rank's logit columns: each rank's log-sum-exp of its
// slice and the target's logit (from the rank whose slice holds it) go to
// every rank of the group (sums that add zeros), and each combines them
// the same way: lse = m + log(sum_r exp(lse_r - m)).
status rank_model::head_loss(const int32_t* targets, int64_t n,
                             double& ce_sum) {
  const int64_t vocab = vocab_rows_;
  if (!comms_.tp) {
    ce_sum = k::cross_entropy_forward(stream_, logits_out_.data(),
                                      targets_.data(), lse_.data(), n, vocab);
    return {};
  }
  // The slice's log-sum-exp per row: local targets, -1 (no loss term)
  // where the target is another rank's. lse_ holds this call's n rows (an
  // evaluation's last piece may be smaller than a micro-batch).
  lse_.resize(stream_, n);
  std::vector<int32_t> local(n, -1);
  std::vector<int64_t> at; // the targets' logits, as [n * vocab] indices
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = targets[i] - vocab_first_;
    if (targets[i] >= 0 && t >= 0 && t < vocab) {
      local[i] = static_cast<int32_t>(t);
      at.push_back(i * vocab + t);
    }
  }
  vocab_ids_.upload(stream_, local);
  k::cross_entropy_forward(stream_, logits_out_.data(), vocab_ids_.data(),
                           lse_.data(), n, vocab);
  const int64_t found = static_cast<int64_t>(at.size());
  std::vector<float> target_logits;
  if (found > 0) {
    vocab_at_.upload(stream_, at);
    vocab_rows_buf_.resize(stream_, found);
    k::gather_rows(stream_, logits_out_.data(), vocab_at_.data(),
                   vocab_rows_buf_.data(), found, 1);
    target_logits = vocab_rows_buf_.to_host(stream_);
  }
  const auto part = lse_.to_host(stream_);
  const int members = comms_.tp->size(), me = comms_.tp->rank();
  std::vector<double> parts(static_cast<size_t>(members * n), 0.0);
  std::vector<double> target(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    parts[me * n + i] = part[i];
  for (int64_t i = 0, j = 0; i < n; ++i)
    if (local[i] >= 0)
      target[i] = target_logits[j++];
  TUTTI_RETURN_IF_ERROR(comms_.tp->all_reduce_sum(parts.data(), parts.size()));
  TUTTI_RETURN_IF_ERROR(
    comms_.tp->all_reduce_sum(target.data(), target.size()));
  std::vector<float> lse(static_cast<size_t>(n));
  ce_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double top = -std::numeric_limits<double>::infinity();
    for (int r = 0; r < members; ++r)
      top = std::max(top, parts[r * n + i]);
    double acc = 0;
    for (int r = 0; r < members; ++r)
      acc += std::exp(parts[r * n + i] - top);
    const double l = top + std::log(acc);
    lse[i] = static_cast<float>(l);
    if (targets[i] >= 0)
      ce_sum += l - target[i];
  }
  lse_.upload(stream_, lse);
  return {};
}

// The slice's logit gradients against the whole row's log-sum-exp; the
// partial input gradients summed over the group (the head is
// column-parallel over the vocabulary).
status rank_model::head_backward(int64_t n, step_timers& time) {
  const int64_t d = cfg_.model.hidden_size, vocab = vocab_rows_;
  dlogits_.resize(stream_, n * vocab);
  k::cross_entropy_backward_slice(
    stream_, logits_out_.data(), targets_.data(), vocab_first_, lse_.data(),
    dlogits_.data(), n, vocab,
    1.0f / static_cast<float>(global_tokens_ * cfg_.train.micro_batches));
  k::linear_backward(stream_, xnf_.data(), param(names::lm_head),
                     dlogits_.data(), dtmp_.data(), grad(names::lm_head), n, d,
                     vocab);
  return tp_sum(dtmp_.data(), n * d, time);
}

} // namespace tutti::train
