#include "tutti/serve/continuation.hpp"

#include <algorithm>

#include "tutti/serve/engine.hpp"
#include "tutti/serve/kv_cache.hpp"

namespace tutti::serve {

expected<continuation> continue_sequence(
  const served_model& model, std::vector<int32_t> prompt,
  const continuation_options& o, const std::function<void(int32_t)>& on_token) {
  const auto& s = model.shape;
  if (prompt.empty())
    return status::error("an empty prompt");
  if (static_cast<int64_t>(prompt.size()) >= s.max_positions)
    prompt.erase(prompt.begin(), prompt.end() - (s.max_positions - 1));
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t length = std::min(n + o.max_new_tokens, s.max_positions);
  const kv_geometry g = geometry_of_shape(s, 16);
  kv_cache cache(g, (length + g.block_tokens - 1) / g.block_tokens);
  std::vector<int32_t> table;
  if (!cache.reserve(table, length))
    return status::error("the KV cache could not be reserved");
  engine forward(model, cache);
  std::vector<float> logits;
  continuation out;
  std::vector<int32_t> next = prompt;
  int64_t at = 0;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    if (at + static_cast<int64_t>(next.size()) > s.max_positions) {
      out.at_max_positions = true;
      break;
    }
    seq_chunk chunk{next.data(), static_cast<int64_t>(next.size()), at, &table,
                    seq_chunk::logits::last};
    TUTTI_RETURN_IF_ERROR(forward.forward({chunk}, logits));
    at += chunk.count;
    const auto id = sample_token(logits.data(), s.vocab, o.sampling, i).token;
    out.tokens.push_back(id);
    if (on_token)
      on_token(id);
    if (id == o.stop_id)
      break;
    next.assign(1, id);
  }
  return out;
}

} // namespace tutti::serve
