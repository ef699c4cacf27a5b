#include "tutti/serve/expert_layout.hpp"

#include <string>

namespace tutti::serve {

namespace {

void fill_positions(expert_layout& x) {
  x.position.assign(x.layers * x.experts, -1);
  for (int64_t l = 0; l < x.layers; ++l)
    for (int64_t p = 0; p < x.experts; ++p) {
      const auto e = x.expert_at(l, p);
      if (e >= 0 && e < x.experts)
        x.position[l * x.experts + e] = static_cast<int32_t>(p);
    }
}

} // namespace

int64_t expert_layout::rank_of(int64_t l, int64_t expert) const {
  const auto pos = position_of(l, expert);
  for (int64_t r = 0; r < ranks; ++r)
    if (pos < end(l, r))
      return r;
  return -1;
}

bool expert_layout::is_contiguous() const {
  if (experts % ranks != 0)
    return false;
  const int64_t per = experts / ranks;
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t p = 0; p < experts; ++p)
      if (expert_at(l, p) != p)
        return false;
    for (int64_t r = 0; r <= ranks; ++r)
      if (begin(l, r) != r * per)
        return false;
  }
  return true;
}

expected<expert_layout> expert_layout::contiguous(int64_t layers,
                                                  int64_t experts,
                                                  int64_t ranks) {
  if (ranks < 1 || experts % ranks != 0)
    return status::error(std::to_string(ranks) + " ranks must divide the "
                         + std::to_string(experts) + " experts");
  return from_plan(
    placement::placement_plan::contiguous(layers, experts, ranks));
}

expert_layout expert_layout::blocks(int64_t layers, int64_t experts,
                                    int64_t ranks) {
  std::vector<int32_t> owner(layers * experts);
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t e = 0; e < experts; ++e)
      owner[l * experts + e] = static_cast<int32_t>(e * ranks / experts);
  return from_owners(layers, experts, ranks, owner).value();
}

expert_layout expert_layout::from_plan(const placement::placement_plan& p) {
  expert_layout x;
  x.layers = p.layers;
  x.experts = p.experts;
  x.ranks = p.ranks;
  x.order = p.expert_at;
  const int64_t per = p.slots_per_rank();
  for (int64_t l = 0; l < p.layers; ++l)
    for (int64_t r = 0; r <= p.ranks; ++r)
      x.bounds.push_back(r * per);
  fill_positions(x);
  return x;
}

expected<expert_layout> expert_layout::from_owners(
  int64_t layers, int64_t experts, int64_t ranks,
  const std::vector<int32_t>& owner) {
  if (static_cast<int64_t>(owner.size()) != layers * experts)
    return status::error("expert layout: an owner for every expert of every "
                         "layer is needed");
  expert_layout x;
  x.layers = layers;
  x.experts = experts;
  x.ranks = ranks;
  for (int64_t l = 0; l < layers; ++l) {
    x.bounds.push_back(0);
    for (int64_t r = 0; r < ranks; ++r) {
      for (int64_t e = 0; e < experts; ++e)
        if (owner[l * experts + e] == r)
          x.order.push_back(static_cast<int32_t>(e));
      x.bounds.push_back(static_cast<int64_t>(x.order.size())
                         - l * experts);
    }
    if (x.bounds.back() != experts)
      return status::error("expert layout: layer " + std::to_string(l)
                           + " has an expert on no rank of "
                           + std::to_string(ranks));
  }
  fill_positions(x);
  return x;
}

expected<expert_layout> expert_layout::from_order(
  int64_t layers, int64_t experts, int64_t ranks, std::vector<int32_t> order,
  std::vector<int64_t> bounds) {
  expert_layout x;
  x.layers = layers;
  x.experts = experts;
  x.ranks = ranks;
  x.order = std::move(order);
  x.bounds = std::move(bounds);
  if (static_cast<int64_t>(x.order.size()) != layers * experts)
    return status::error("expert layout: sizes do not match the shape");
  fill_positions(x);
  TUTTI_RETURN_IF_ERROR(x.check());
  return x;
}

status expert_layout::check() const {
  if (layers < 1 || experts < 1 || ranks < 1)
    return status::error("expert layout: layers, experts and ranks must be "
                         ">= 1");
  if (static_cast<int64_t>(order.size()) != layers * experts
      || static_cast<int64_t>(position.size()) != layers * experts
      || static_cast<int64_t>(bounds.size()) != layers * (ranks + 1))
    return status::error("expert layout: sizes do not match the shape");
  for (int64_t l = 0; l < layers; ++l) {
    if (begin(l, 0) != 0 || end(l, ranks - 1) != experts)
      return status::error("expert layout: layer " + std::to_string(l)
                           + " does not cover its experts");
    for (int64_t r = 0; r < ranks; ++r)
      if (end(l, r) < begin(l, r))
        return status::error("expert layout: layer " + std::to_string(l)
                             + " has falling bounds");
    for (int64_t p = 0; p < experts; ++p) {
      const auto e = expert_at(l, p);
      if (e < 0 || e >= experts || position_of(l, e) != p)
        return status::error("expert layout: layer " + std::to_string(l)
                             + " is not a permutation of the experts");
    }
  }
  if (offload_rank >= ranks)
    return status::error("expert layout: offload rank "
                         + std::to_string(offload_rank) + " of "
                         + std::to_string(ranks));
  return {};
}

} // namespace tutti::serve
