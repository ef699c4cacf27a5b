// Starting tokens where their experts are (data.rack_affinity), in parts:
// the deal sends each window to the rack, then the rank, holding most of
// its tokens' experts while every rank keeps its share; the chained
// planner keeps a group of experts that pass tokens to each other in one
// rack through the layers; the context-free prediction of a token's
// experts follows the router (bias included); plans keep token_experts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <unistd.h>

#include "tutti/data/affinity_deal.hpp"
#include "tutti/placement/plan.hpp"
#include "tutti/placement/planner.hpp"
#include "tutti/placement/token_experts.hpp"

using namespace tutti;
using namespace tutti::placement;

TEST_CASE("the deal sends windows to the rack and rank of their experts, "
          "each rank keeping its share",
          "[placement]") {
  // Members 0,1 in rack 0, members 2,3 in rack 1; 2 windows each.
  const std::vector<int64_t> racks = {0, 0, 1, 1};
  auto only = [](int64_t member, double v) {
    std::vector<double> out(4, 0.0);
    out[member] = v;
    return out;
  };
  // Each window votes for one member; every member gets its two.
  std::vector<std::vector<double>> votes = {only(3, 9), only(0, 9), only(2, 9),
                                            only(1, 9), only(0, 8), only(3, 8),
                                            only(1, 8), only(2, 8)};
  auto dealt = data::deal_by_affinity(votes, racks, 2);
  REQUIRE(dealt.size() == 4);
  CHECK(dealt[0] == std::vector<int64_t>{1, 4});
  CHECK(dealt[1] == std::vector<int64_t>{3, 6});
  CHECK(dealt[2] == std::vector<int64_t>{2, 7});
  CHECK(dealt[3] == std::vector<int64_t>{0, 5});
  CHECK(data::deal_by_affinity(votes, racks, 2) == dealt); // a pure function

  // Six windows want rack 0, which has room for four: the four that want
  // it most go there, the other two to rack 1.
  votes = {{5, 0, 1, 0}, {9, 0, 0, 0}, {0, 7, 0, 0}, {0, 0, 3, 3},
           {2, 2, 1, 1}, {0, 8, 0, 0}, {3, 0, 0, 0}, {0, 0, 0, 6}};
  dealt = data::deal_by_affinity(votes, racks, 2);
  std::set<int64_t> in_rack0;
  for (int64_t m : {0, 1})
    in_rack0.insert(dealt[m].begin(), dealt[m].end());
  CHECK(in_rack0 == std::set<int64_t>{0, 1, 2, 5});
  std::set<int64_t> all;
  for (const auto& d : dealt) {
    CHECK(d.size() == 2);
    CHECK(std::is_sorted(d.begin(), d.end()));
    all.insert(d.begin(), d.end());
  }
  CHECK(all.size() == 8);
}

TEST_CASE("chained layers keep a group of experts in one rack through the "
          "layers",
          "[placement]") {
  // Tokens of 4 topics; each topic uses 4 of 16 experts at every layer (a
  // different 4 per layer, by a shuffle), so co-activation pairs experts
  // within a layer and transitions link a topic's experts across layers.
  const int64_t L = 4, E = 16, K = 2, topics = 4, n = 4000;
  std::mt19937_64 rng(11);
  std::vector<std::vector<int32_t>> member(L, std::vector<int32_t>(E));
  for (auto& perm : member) {
    for (int64_t e = 0; e < E; ++e)
      perm[e] = int32_t(e);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  std::vector<int32_t> ids(L * n * K);
  std::uniform_int_distribution<int64_t> topic(0, topics - 1), pick(0, 3);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t c = topic(rng);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t a = pick(rng);
      int64_t b = pick(rng);
      while (b == a)
        b = pick(rng);
      ids[(l * n + t) * K] = member[l][c * 4 + a];
      ids[(l * n + t) * K + 1] = member[l][c * 4 + b];
    }
  }
  auto st = routing_stats::zeros(L, E, K);
  REQUIRE(st.add(ids.data(), n));
  const auto topo = topology::regular(2, 2, 1); // 4 ranks, 2 racks
  auto plan = plan_rack_aware(st, topo, {1.1, true});
  REQUIRE(plan.ok());
  const auto& p = plan.value();
  const auto slot_of = p.slot_of();
  auto rack_of = [&](int64_t l, int32_t e) {
    return topo.rack_of_rank(slot_of[l * E + e] / p.slots_per_rank());
  };
  for (int64_t c = 0; c < topics; ++c) {
    const auto home = rack_of(0, member[0][c * 4]);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < 4; ++j) {
        INFO("topic " << c << " layer " << l);
        CHECK(rack_of(l, member[l][c * 4 + j]) == home);
      }
  }
}

TEST_CASE("a token's experts on its own follow the router, bias included",
          "[placement]") {
  // Attention and experts add nothing (zero value and down projections),
  // so every layer routes the embedding itself: token t is the unit vector
  // on dimension t, and expert e's router row reads dimension e.
  const int64_t V = 4, D = 4, F = 2, L = 2, E = 4;
  std::map<std::string, std::vector<float>> w;
  auto eye = [](int64_t rows, int64_t cols) {
    std::vector<float> m(rows * cols, 0.0f);
    for (int64_t i = 0; i < std::min(rows, cols); ++i)
      m[i * cols + i] = 1.0f;
    return m;
  };
  w["model.embed_tokens.weight"] = eye(V, D);
  for (int64_t l = 0; l < L; ++l) {
    const auto pre = "model.layers." + std::to_string(l) + ".";
    w[pre + "input_layernorm.weight"] = std::vector<float>(D, 1.0f);
    w[pre + "post_attention_layernorm.weight"] = std::vector<float>(D, 1.0f);
    w[pre + "self_attn.v_proj.weight"] = std::vector<float>(D / 2 * D, 0.0f);
    w[pre + "self_attn.o_proj.weight"] = std::vector<float>(D * D, 0.0f);
    w[pre + "block_sparse_moe.gate.weight"] = eye(E, D);
    for (int64_t e = 0; e < E; ++e) {
      const auto ex = pre + "block_sparse_moe.experts." + std::to_string(e);
      w[ex + ".w1.weight"] = std::vector<float>(F * D, 0.5f);
      w[ex + ".w3.weight"] = std::vector<float>(F * D, 0.5f);
      w[ex + ".w2.weight"] = std::vector<float>(D * F, 0.0f);
    }
  }
  // Layer 1's selection bias favours expert 3 over all but a token's own.
  w["model.layers.1.block_sparse_moe.gate.e_score_correction_bias"] = {0, 0, 0,
                                                                       0.5f};
  token_model m;
  m.vocab = V, m.hidden = D, m.intermediate = F, m.layers = L, m.heads = 2,
  m.kv_heads = 1, m.experts = E, m.top_k = 2;
  m.tensor = [&](const std::string& name) -> std::span<const float> {
    auto at = w.find(name);
    return at == w.end() ? std::span<const float>()
                         : std::span<const float>(at->second);
  };
  auto got = experts_per_token(m);
  REQUIRE(got.ok());
  // [token][layer][j]: layer 0 its own expert, then the lowest index
  // (ties); layer 1 its own, then 3 (the bias), or 3 then the lowest.
  const std::vector<int32_t> want = {0, 1, 0, 3, 1, 0, 1, 3,
                                     2, 0, 2, 3, 3, 0, 3, 0};
  CHECK(got.value() == want);

  w.erase("model.layers.1.self_attn.o_proj.weight");
  auto missing = experts_per_token(m);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.message(), Catch::Contains("layers.1.self_attn.o_proj"));
}

TEST_CASE("plans keep token_experts, and refuse bad ones", "[placement]") {
  auto plan = placement_plan::contiguous(2, 4, 2);
  plan.token_top_k = 2;
  plan.token_experts = {0, 1, 2, 3, 3, 2, 1, 0, 0, 3, 1, 2}; // 3 tokens
  REQUIRE(plan.check());
  CHECK(plan.token_vocab() == 3);
  auto back = placement_plan::from_json(plan.to_json());
  REQUIRE(back.ok());
  CHECK(back.value().token_experts == plan.token_experts);
  CHECK(back.value().token_top_k == 2);

  auto bad = plan;
  bad.token_experts[5] = 4;
  CHECK_THAT(bad.check().message(), Catch::Contains("token 1 names expert 4"));
  bad.token_experts.pop_back();
  CHECK_THAT(bad.check().message(), Catch::Contains("per layer per token"));
  auto text = plan.to_json();
  text.replace(text.find("[[[0,1]"), 7, "[[[0]");
  CHECK_THAT(placement_plan::from_json(text).message(),
             Catch::Contains("token_experts"));
}
