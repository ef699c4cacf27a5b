#include "tutti/generate/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tutti::generate {

namespace {

// splitmix64: one well-mixed 64-bit draw per (seed, position).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

std::int32_t pick_token(const std::vector<float>& logits,
                        const sampling_options& o, std::uint64_t draw) {
  const auto best = std::max_element(logits.begin(), logits.end());
  if (o.temperature <= 0)
    return static_cast<std::int32_t>(best - logits.begin());
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::size_t keep = ids.size();
  if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < ids.size()) {
    keep = static_cast<std::size_t>(o.top_k);
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                      [&](auto a, auto b) { return logits[a] > logits[b]; });
  }
  std::vector<double> weights(keep);
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i)
    total += weights[i] = std::exp((logits[ids[i]] - *best) / o.temperature);
  double u = static_cast<double>(draw >> 11) * 0x1p-53 * total;
  for (std::size_t i = 0; i < keep; ++i)
    if ((u -= weights[i]) < 0)
      return ids[i];
  return ids[keep - 1];
}

expected<std::vector<std::int32_t>> continue_text(
  const checkpoint_model& model, std::vector<std::int32_t> prompt,
  const sampling_options& o,
  const std::function<void(std::int32_t)>& on_token) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < o.max_new_tokens; ++i) {
    auto logits = model.next_logits(prompt);
    if (!logits.ok())
      return logits.error();
    const auto id = pick_token(
      logits.value(), o, mix(o.seed ^ mix(static_cast<std::uint64_t>(i))));
    out.push_back(id);
    prompt.push_back(id);
    if (on_token)
      on_token(id);
    if (id == o.stop_id)
      break;
  }
  return out;
}

} // namespace tutti::generate
