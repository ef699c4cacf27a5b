#pragma once
// The serving forward: one step over a batch of sequence chunks, each some
// new tokens of one sequence whose earlier positions are already in the
// paged KV cache. It writes the new tokens' keys and values into the cache
// and returns the logits the chunks ask for. Every row is computed on its
// own (packed_gemm.hpp, invariant_ops.hpp and the row-wise ops of
// kernels/ops.hpp), so a sequence's logits are the same bits alone or in
// any batch, and the same whether its tokens came in one chunk or many. Runs on the calling
// thread; one engine per thread. An empty batch is a step too: with an
// expert_exchange the rank still takes its part in every layer's exchange.

#include <cstdint>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/kv_cache.hpp"
#include "tutti/serve/model.hpp"

namespace tutti::serve {

struct seq_chunk {
  const int32_t* tokens = nullptr; // the new tokens
  int64_t count = 0;
  int64_t start = 0; // position of tokens[0]; [0, start) is in the cache
  const std::vector<int32_t>* blocks = nullptr; // covers start + count
  // Which rows' logits to return: none, the last row (next-token sampling),
  // or every row (tests, prompt logprobs).
  enum class logits { none, last, all } want = logits::last;
  int32_t rank = 0; // the rank whose KV cache holds the sequence (ep_ranks)
};

// Where a layer's experts run when not in the engine itself: expert
// parallelism sends each (token, slot) row to the rank owning its expert and
// brings the outputs back (ep_rank.cpp). Every rank of a group calls run()
// once per layer and step, with zero rows too: it is a collective.
class expert_exchange {
public:
  virtual ~expert_exchange() = default;
  // xn: [rows, hidden]; topk: [rows * top_k] expert ids; out: [rows * top_k,
  // hidden], the chosen expert's output for each (token, slot).
  virtual status run(int64_t layer, const float* xn, const int32_t* topk,
                     int64_t rows, float* out) = 0;
};

class engine {
public:
  engine(const served_model& model, kv_cache& cache);
  // Experts through `experts` (not owned) instead of in this engine.
  engine(const served_model& model, kv_cache& cache, expert_exchange* experts);

  // Logits of the requested rows, chunk by chunk in batch order, each
  // [vocab]. Refuses (before touching the cache) a token outside the
  // vocabulary, a position past max_positions or a block table too short.
  status forward(const std::vector<seq_chunk>& batch,
                 std::vector<float>& logits);

  // Tokens routed to each expert since construction, [layer * experts + e].
  const std::vector<int64_t>& expert_activations() const {
    return activations_;
  }

  const served_model& model() const { return model_; }

private:
  void attention(int64_t layer, const std::vector<seq_chunk>& batch);
  // Multi-head latent attention over the latent cache, absorbed
  // (engine_mla.cpp).
  void mla_attention(int64_t layer, const std::vector<seq_chunk>& batch);
  status moe(int64_t layer, int64_t rows);

  const served_model& model_;
  kv_cache& cache_;
  expert_exchange* experts_ = nullptr;
  std::vector<int64_t> activations_;
  // Per-step scratch, [rows, ...].
  std::vector<int32_t> ids_, topk_;
  std::vector<int64_t> pos_;
  std::vector<float> x_, xn_, rstd_, q_, k_, v_, attn_, tmp_, router_, gate_,
    moe_out_, xe_, a_, h_, ye_, scores_, sums_;
  std::vector<float> mlp_out_; // the dense or shared MLP's output
  // Qwen3-MoE: the per-head norms' reciprocals, the router's softmax over
  // all experts (gates without renormalisation).
  std::vector<float> head_rstd_, probs_;
  // MLA: the query latent, each row's latent ([rows, kv_lora_rank +
  // qk_rope_head_dim]), the queries' rotated parts and latent queries.
  std::vector<float> q_lat_, latent_, q_pe_, q_absorbed_;
};

} // namespace tutti::serve
