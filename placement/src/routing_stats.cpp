#include "tutti/placement/routing_stats.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tutti::placement {

routing_stats routing_stats::zeros(int64_t layers, int64_t experts,
                                   int64_t top_k) {
  routing_stats s;
  s.layers = layers;
  s.experts = experts;
  s.top_k = top_k;
  s.load.assign(layers * experts, 0);
  s.coactivation.assign(layers * experts * experts, 0);
  s.transitions.assign(std::max<int64_t>(layers - 1, 0) * experts * experts, 0);
  return s;
}

status routing_stats::add(const int32_t* ids, int64_t n) {
  const int64_t E = experts, K = top_k;
  for (int64_t i = 0; i < layers * n * K; ++i)
    if (ids[i] < unrouted || ids[i] >= E)
      return status::error("routing_stats: expert id " + std::to_string(ids[i])
                           + " outside [0, " + std::to_string(E) + ")");
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t t = 0; t < n; ++t) {
      const int32_t* chosen = ids + (l * n + t) * K;
      for (int64_t a = 0; a < K; ++a) {
        if (chosen[a] == unrouted)
          continue;
        load[l * E + chosen[a]] += 1;
        for (int64_t b = a + 1; b < K; ++b) {
          if (chosen[b] == unrouted)
            continue;
          coactivation[(l * E + chosen[a]) * E + chosen[b]] += 1;
          coactivation[(l * E + chosen[b]) * E + chosen[a]] += 1;
        }
        if (l + 1 < layers) {
          const int32_t* next = ids + ((l + 1) * n + t) * K;
          for (int64_t b = 0; b < K; ++b)
            if (next[b] != unrouted)
              transitions[(l * E + chosen[a]) * E + next[b]] += 1;
        }
      }
    }
  tokens += n;
  return {};
}

status routing_stats::merge(const routing_stats& o) {
  if (o.layers != layers || o.experts != experts || o.top_k != top_k)
    return status::error(
      "routing_stats: cannot merge " + std::to_string(o.layers) + "x"
      + std::to_string(o.experts) + " top-" + std::to_string(o.top_k) + " into "
      + std::to_string(layers) + "x" + std::to_string(experts) + " top-"
      + std::to_string(top_k));
  auto add_all = [](std::vector<int64_t>& to,
                    const std::vector<int64_t>& from) {
    for (size_t i = 0; i < to.size(); ++i)
      to[i] += from[i];
  };
  add_all(load, o.load);
  add_all(coactivation, o.coactivation);
  add_all(transitions, o.transitions);
  tokens += o.tokens;
  if (o.first_step > 0 && (first_step == 0 || o.first_step < first_step))
    first_step = o.first_step;
  last_step = std::max(last_step, o.last_step);
  return {};
}

double routing_stats::imbalance(int64_t l) const {
  int64_t sum = 0, most = 0;
  for (int64_t e = 0; e < experts; ++e) {
    sum += load_at(l, e);
    most = std::max(most, load_at(l, e));
  }
  return sum == 0 ? 0.0 : double(most) * double(experts) / double(sum);
}

std::vector<int64_t> routing_stats::to_flat() const {
  std::vector<int64_t> out;
  out.reserve(1 + load.size() + coactivation.size() + transitions.size());
  out.push_back(tokens);
  out.insert(out.end(), load.begin(), load.end());
  out.insert(out.end(), coactivation.begin(), coactivation.end());
  out.insert(out.end(), transitions.begin(), transitions.end());
  return out;
}

status routing_stats::from_flat(const std::vector<int64_t>& flat) {
  if (flat.size() != 1 + load.size() + coactivation.size() + transitions.size())
    return status::error("routing_stats: flat array of the wrong size");
  auto at = flat.begin();
  tokens = *at++;
  for (auto* v : {&load, &coactivation, &transitions}) {
    std::copy(at, at + std::ptrdiff_t(v->size()), v->begin());
    at += std::ptrdiff_t(v->size());
  }
  return {};
}

namespace {

// [rows][cols] of a flat array, as nested JSON arrays.
nlohmann::json nested(const std::vector<int64_t>& flat, int64_t outer,
                      int64_t rows, int64_t cols) {
  auto out = nlohmann::json::array();
  for (int64_t o = 0; o < outer; ++o) {
    auto matrix = nlohmann::json::array();
    for (int64_t r = 0; r < rows; ++r) {
      const auto begin = flat.begin() + std::ptrdiff_t((o * rows + r) * cols);
      matrix.push_back(std::vector<int64_t>(begin, begin + cols));
    }
    out.push_back(rows == 1 ? matrix[0] : matrix);
  }
  return out;
}

bool flatten(const nlohmann::json& j, int64_t outer, int64_t rows, int64_t cols,
             std::vector<int64_t>& out) {
  if (!j.is_array() || int64_t(j.size()) != outer)
    return false;
  size_t i = 0;
  for (const auto& m : j) {
    auto row_of = [&](const nlohmann::json& row) {
      if (!row.is_array() || int64_t(row.size()) != cols)
        return false;
      for (const auto& x : row) {
        if (!x.is_number_integer())
          return false;
        out[i++] = x.get<int64_t>();
      }
      return true;
    };
    if (rows == 1) {
      if (!row_of(m))
        return false;
      continue;
    }
    if (!m.is_array() || int64_t(m.size()) != rows)
      return false;
    for (const auto& row : m)
      if (!row_of(row))
        return false;
  }
  return true;
}

} // namespace

std::string routing_stats::to_json() const {
  nlohmann::ordered_json j;
  j["layers"] = layers;
  j["experts"] = experts;
  j["top_k"] = top_k;
  j["first_step"] = first_step;
  j["last_step"] = last_step;
  j["tokens"] = tokens;
  j["load"] = nested(load, layers, 1, experts);
  j["coactivation"] = nested(coactivation, layers, experts, experts);
  j["transitions"] = nested(transitions, std::max<int64_t>(layers - 1, 0),
                            experts, experts);
  return j.dump();
}

expected<routing_stats> routing_stats::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error("routing statistics: not a JSON object");
  for (const char* key : {"layers", "experts", "top_k", "tokens", "load",
                          "coactivation", "transitions"})
    if (!j.contains(key))
      return status::error(std::string("routing statistics: missing key \"")
                           + key + "\"");
  for (const char* key : {"layers", "experts", "top_k"})
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1
        || j[key].get<int64_t>() > 100000)
      return status::error(std::string("routing statistics: \"") + key
                           + "\" must be an integer in [1, 100000]");
  auto s = zeros(j["layers"].get<int64_t>(), j["experts"].get<int64_t>(),
                 j["top_k"].get<int64_t>());
  s.tokens = j["tokens"].is_number_integer() ? j["tokens"].get<int64_t>() : 0;
  s.first_step = j.value("first_step", int64_t{0});
  s.last_step = j.value("last_step", int64_t{0});
  if (!flatten(j["load"], s.layers, 1, s.experts, s.load))
    return status::error(
      "routing statistics: \"load\" is not [layers][experts] "
      "integers");
  if (!flatten(j["coactivation"], s.layers, s.experts, s.experts,
               s.coactivation))
    return status::error("routing statistics: \"coactivation\" is not "
                         "[layers][experts][experts] integers");
  if (!flatten(j["transitions"], std::max<int64_t>(s.layers - 1, 0), s.experts,
               s.experts, s.transitions))
    return status::error("routing statistics: \"transitions\" is not "
                         "[layers-1][experts][experts] integers");
  return s;
}

} // namespace tutti::placement
