#include "tutti/store/expert_blocks.hpp"

#include <charconv>

namespace tutti::store {

expected<block_experts> block_experts_of(const shard_meta& meta) {
  block_experts out;
  if (auto first = meta.ints.find("first_expert"); first != meta.ints.end())
    out.first = first->second;
  auto text = meta.strings.find("expert_ids");
  if (text == meta.strings.end())
    return out;
  const auto& s = text->second;
  out.ids.emplace_back();
  for (size_t i = 0; i < s.size();) {
    if (s[i] == ';') {
      out.ids.emplace_back();
      ++i;
      continue;
    }
    if (s[i] == ',') {
      ++i;
      continue;
    }
    int64_t id = 0;
    auto [end, ec] = std::from_chars(s.data() + i, s.data() + s.size(), id);
    if (ec != std::errc() || id < 0)
      return status::error("checkpoint shard of rank "
                           + std::to_string(meta.rank)
                           + ": malformed expert_ids at character "
                           + std::to_string(i));
    out.ids.back().push_back(id);
    i = static_cast<size_t>(end - s.data());
  }
  return out;
}

std::string block_experts_text(const std::vector<std::vector<int64_t>>& ids) {
  std::string out;
  for (size_t l = 0; l < ids.size(); ++l) {
    if (l > 0)
      out += ';';
    for (size_t j = 0; j < ids[l].size(); ++j) {
      if (j > 0)
        out += ',';
      out += std::to_string(ids[l][j]);
    }
  }
  return out;
}

} // namespace tutti::store
