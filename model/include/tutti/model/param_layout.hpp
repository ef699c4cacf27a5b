#pragma once
// Where each named tensor lives in a flat parameter buffer. Names follow
// Hugging Face's MixtralForCausalLM so checkpoints map onto it one-to-one.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::model {

struct tensor_spec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0; // in elements
  int64_t numel = 0;
};

class param_layout {
public:
  const tensor_spec& add(std::string name, std::vector<int64_t> shape);
  const tensor_spec& at(const std::string& name) const;
  // Null when the layout has no tensor of that name.
  const tensor_spec* find(const std::string& name) const;
  const std::vector<tensor_spec>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }

private:
  std::vector<tensor_spec> tensors_;
  int64_t total_ = 0;
};

// Replicated (data-parallel) weights: embedding, attention, norms, routers,
// shared experts, the leading dense layers' MLPs, LM head.
param_layout dense_layout(const model_config& m, const moe_config& e);

// The experts [first_expert, first_expert + count) of every layer, stored per
// layer as w1 [count, F, D], w3 [count, F, D], w2 [count, D, F] blocks. Each
// expert's tensors are named by their global expert index.
param_layout expert_layout(const model_config& m, int64_t first_expert,
                           int64_t count);

// Name of the w1/w2/w3 block of one layer in expert_layout.
std::string expert_block_name(int64_t layer, const char* which);

// Deterministic initialisation from (seed, tensor name): independent of how
// experts are spread over ranks, so every layout starts from the same model.
// Norm weights are 1, everything else N(0, std).
void init_params(const param_layout& layout, float* values, uint64_t seed,
                 double std);

// Same values as init_params would give for expert tensors named by global
// index (used by expert_layout blocks).
void init_expert_params(const param_layout& layout, float* values,
                        const model_config& m, int64_t first_expert,
                        int64_t count, uint64_t seed, double std);

// The same for blocks holding any experts: `expert_ids` [layer][row of the
// block] (a placement's experts_of_rank), count = rows per layer. Layers
// whose blocks `layout` lacks (another pipeline stage's) are skipped.
void init_expert_params(const param_layout& layout, float* values,
                        const model_config& m,
                        const std::vector<int32_t>& expert_ids, int64_t count,
                        uint64_t seed, double std);

} // namespace tutti::model
