#include <nlohmann/json.hpp>

#include "tutti/placement/plan.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::placement {

std::vector<int32_t> placement_plan::slot_of() const {
  std::vector<int32_t> out(expert_at.size());
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t s = 0; s < experts; ++s)
      out[l * experts + expert_in(l, s)] = static_cast<int32_t>(s);
  return out;
}

int64_t placement_plan::rank_of(int64_t layer, int32_t expert) const {
  for (int64_t s = 0; s < experts; ++s)
    if (expert_in(layer, s) == expert)
      return s / slots_per_rank();
  return -1;
}

std::vector<int32_t> placement_plan::experts_of_rank(int64_t rank) const {
  std::vector<int32_t> out;
  const int64_t per = slots_per_rank();
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t j = 0; j < per; ++j)
      out.push_back(expert_in(l, rank * per + j));
  return out;
}

bool placement_plan::is_contiguous() const {
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t s = 0; s < experts; ++s)
      if (expert_in(l, s) != s)
        return false;
  return true;
}

placement_plan placement_plan::contiguous(int64_t layers, int64_t experts,
                                          int64_t ranks) {
  placement_plan p;
  p.layers = layers;
  p.experts = experts;
  p.ranks = ranks;
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t e = 0; e < experts; ++e)
      p.expert_at.push_back(static_cast<int32_t>(e));
  return p;
}

status placement_plan::check() const {
  if (layers < 1 || experts < 1 || ranks < 1)
    return status::error("placement: layers, experts and ranks must be >= 1");
  if (experts % ranks != 0)
    return status::error("placement: " + std::to_string(experts)
                         + " experts do not divide over "
                         + std::to_string(ranks) + " ranks");
  if (int64_t(expert_at.size()) != layers * experts)
    return status::error("placement: expected " + std::to_string(layers)
                         + " layers of " + std::to_string(experts) + " slots");
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<char> seen(experts, 0);
    for (int64_t s = 0; s < experts; ++s) {
      const auto e = expert_in(l, s);
      if (e < 0 || e >= experts || seen[e])
        return status::error("placement: layer " + std::to_string(l)
                             + " is not a permutation of the experts (slot "
                             + std::to_string(s) + " holds " + std::to_string(e)
                             + ")");
      seen[e] = 1;
    }
  }
  const int64_t per_token = token_top_k * layers;
  if (token_top_k < 0 || (token_top_k > 0 && token_experts.empty())
      || (token_top_k > 0 && token_experts.size() % per_token != 0))
    return status::error("placement: token_experts must list top_k experts "
                         "per layer per token");
  for (size_t i = 0; i < token_experts.size(); ++i)
    if (token_experts[i] < 0 || token_experts[i] >= experts)
      return status::error("placement: token_experts of token "
                           + std::to_string(i / per_token) + " names expert "
                           + std::to_string(token_experts[i]));
  return {};
}

std::string placement_plan::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = "tutti-placement-1";
  j["layers"] = layers;
  j["experts"] = experts;
  j["ranks"] = ranks;
  auto& at = j["expert_at"] = nlohmann::ordered_json::array();
  for (int64_t l = 0; l < layers; ++l)
    at.push_back(std::vector<int32_t>(
      expert_at.begin() + std::ptrdiff_t(l * experts),
      expert_at.begin() + std::ptrdiff_t((l + 1) * experts)));
  if (token_top_k > 0) {
    auto& te = j["token_experts"] = nlohmann::ordered_json::array();
    auto at = token_experts.begin();
    for (int64_t t = 0; t < token_vocab(); ++t) {
      auto token = nlohmann::ordered_json::array();
      for (int64_t l = 0; l < layers; ++l, at += token_top_k)
        token.push_back(std::vector<int32_t>(at, at + token_top_k));
      te.push_back(std::move(token));
    }
  }
  return j.dump() + "\n";
}

expected<placement_plan> placement_plan::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error("placement: not a JSON object");
  if (j.value("format", std::string()) != "tutti-placement-1")
    return status::error("placement: \"format\" must be \"tutti-placement-1\"");
  placement_plan p;
  for (auto [key, to] :
       {std::pair{"layers", &p.layers}, std::pair{"experts", &p.experts},
        std::pair{"ranks", &p.ranks}}) {
    if (!j.contains(key) || !j[key].is_number_integer())
      return status::error(std::string("placement: \"") + key
                           + "\" must be an integer");
    *to = j[key].get<int64_t>();
  }
  if (p.layers < 1 || p.layers > 100000 || p.experts < 1 || p.experts > 100000)
    return status::error("placement: layers or experts out of range");
  const auto& at = j.value("expert_at", nlohmann::json());
  if (!at.is_array() || int64_t(at.size()) != p.layers)
    return status::error("placement: \"expert_at\" must list every layer");
  for (const auto& layer : at) {
    if (!layer.is_array() || int64_t(layer.size()) != p.experts)
      return status::error("placement: each layer of \"expert_at\" must list "
                           + std::to_string(p.experts) + " experts");
    for (const auto& e : layer) {
      if (!e.is_number_integer())
        return status::error("placement: expert ids must be integers");
      p.expert_at.push_back(e.get<int32_t>());
    }
  }
  if (j.contains("token_experts")) {
    const auto& te = j["token_experts"];
    const auto bad = status::error(
      "placement: \"token_experts\" must list, for each token, each "
      "layer's top-k experts");
    if (!te.is_array() || te.empty() || !te[0].is_array() || te[0].empty()
        || !te[0][0].is_array() || te[0][0].empty())
      return bad;
    p.token_top_k = int64_t(te[0][0].size());
    for (const auto& token : te) {
      if (!token.is_array() || int64_t(token.size()) != p.layers)
        return bad;
      for (const auto& layer : token) {
        if (!layer.is_array() || int64_t(layer.size()) != p.token_top_k)
          return bad;
        for (const auto& e : layer) {
          if (!e.is_number_integer())
            return status::error("placement: expert ids must be integers");
          p.token_experts.push_back(e.get<int32_t>());
        }
      }
    }
  }
  TUTTI_RETURN_IF_ERROR(p.check());
  return p;
}

status placement_plan::write(const std::filesystem::path& file) const {
  return store::write_file_atomic(file, to_json());
}

expected<placement_plan> placement_plan::read(
  const std::filesystem::path& file) {
  auto text = store::read_file(file);
  if (!text.ok())
    return status::error("placement: " + text.message());
  auto p = from_json(text.value());
  if (!p.ok())
    return status::error(file.string() + ": " + p.message());
  return p;
}

} // namespace tutti::placement
