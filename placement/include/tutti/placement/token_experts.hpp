#pragma once
// Which experts a model picks for each vocabulary token at every MoE
// layer when the token is its own whole context (attention over one
// position returns its value vector), from the weights under their
// Hugging Face names (tutti export): a cheap, context-free prediction of
// where a token's rows will go. data.rack_affinity deals a step's windows
// to the rack holding most of their tokens' predicted experts
// (placement_plan::token_experts). Plain loops, once per plan.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::placement {

struct token_model {
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0,
          kv_heads = 0, experts = 0, top_k = 0;
  double rms_norm_eps = 1e-5, router_temperature = 1.0;
  // The tensor of that name, row-major; empty when there is none (only a
  // router's selection bias may be missing: zeros).
  std::function<std::span<const float>(const std::string&)> tensor;
};

// [token][layer][j]: its top_k experts per layer, best first by logit +
// selection bias (ties to the lower index, as the router). Fails naming a
// missing or misshapen tensor.
expected<std::vector<int32_t>> experts_per_token(const token_model& m);

} // namespace tutti::placement
