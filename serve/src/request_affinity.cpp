#include "tutti/serve/request_affinity.hpp"

#include <algorithm>
#include <string>

namespace tutti::serve {

expected<std::shared_ptr<const request_affinity>> request_affinity::from_plan(
  const placement::placement_plan& plan,
  const std::vector<int64_t>& rack_of_rank) {
  if (plan.token_experts.empty())
    return status::error("serve.rack_affinity: the placement has no "
                         "token_experts (make it with tutti placement plan "
                         "--method affinity --model EXPORT_DIR)");
  if (int64_t(rack_of_rank.size()) != plan.ranks)
    return status::error("serve.rack_affinity: the placement is for "
                         + std::to_string(plan.ranks) + " ranks, serve.racks "
                         "names " + std::to_string(rack_of_rank.size()));
  auto out = std::make_shared<request_affinity>();
  out->rack_of_rank_ = rack_of_rank;
  out->racks_ = 1 + *std::max_element(rack_of_rank.begin(), rack_of_rank.end());
  out->vocab_ = plan.token_vocab();
  const int64_t E = plan.experts, L = plan.layers, K = plan.token_top_k;
  const int64_t S = plan.slots_per_rank();
  const auto slot_of = plan.slot_of();
  out->votes_.assign(out->vocab_ * out->racks_, 0.0);
  for (int64_t v = 0; v < out->vocab_; ++v)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = plan.token_experts[(v * L + l) * K + k];
        const int64_t rank = slot_of[l * E + e] / S;
        out->votes_[v * out->racks_ + rack_of_rank[rank]] += 1;
      }
  return std::shared_ptr<const request_affinity>(std::move(out));
}

int64_t request_affinity::rack_for(const std::vector<int32_t>& tokens) const {
  std::vector<double> sum(racks_, 0.0);
  for (int32_t t : tokens)
    if (t >= 0 && t < vocab_)
      for (int64_t r = 0; r < racks_; ++r)
        sum[r] += votes_[t * racks_ + r];
  return std::max_element(sum.begin(), sum.end()) - sum.begin();
}

} // namespace tutti::serve
