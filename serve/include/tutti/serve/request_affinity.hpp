#pragma once
// serve.rack_affinity: which rack a request's tokens will mostly go to.
// The placement plan's token_experts hold the model's own top-k experts
// for each vocabulary token at every layer (`tutti placement plan --method
// affinity`); a request whose prompt's tokens pick experts of one rack
// starts on a rank of that rack, so its rows, prompt and generated, cross
// racks less (as data.rack_affinity deals training windows). A pure
// function of the prompt: the same request goes to the same rack.

#include <cstdint>
#include <memory>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/placement/plan.hpp"

namespace tutti::serve {

class request_affinity {
public:
  // `rack_of_rank`: each EP rank's rack index (serve.racks). Refuses a plan
  // without token_experts, or one for another number of ranks.
  static expected<std::shared_ptr<const request_affinity>> from_plan(
    const placement::placement_plan& plan,
    const std::vector<int64_t>& rack_of_rank);

  // The rack holding most of the tokens' picks (ties: the lower rack);
  // tokens outside the plan's vocabulary count for none.
  int64_t rack_for(const std::vector<int32_t>& tokens) const;
  int64_t rack_of_rank(int64_t rank) const { return rack_of_rank_[rank]; }
  int64_t racks() const { return racks_; }

private:
  std::vector<double> votes_; // [token][rack]: its picks held by the rack
  std::vector<int64_t> rack_of_rank_;
  int64_t racks_ = 0, vocab_ = 0;
};

} // namespace tutti::serve
