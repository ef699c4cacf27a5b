// Starting tokens where their experts are (data.rack_affinity), in parts:
// the deal sends each window to the rack, then the rank, holding most of
// its tokens' experts while every rank keeps its share; the chained
// planner keeps a group of experts that pass tokens to each other in one
// rack through the layers; the context-free prediction of a token's
// experts follows the router (bias included); plans keep token_experts;
// tokens are dealt to racks by their picks, and the plan made with those
// racks keeps at least as many picks there as the chained one (on a
// trained model's tokens it kept more: bench_two_rack).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
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

TEST_CASE("tokens are dealt to the rack of most of their picks, racks "
          "filled by their ranks",
          "[placement]") {
  // 2 layers x 4 experts, 2 ranks in 2 racks: rack 0 holds experts 0 and 1.
  const auto plan = placement_plan::contiguous(2, 4, 2);
  const auto topo = topology::regular(2, 1, 1);
  // Four tokens, top-2: two all in rack 0, one all in rack 1, one split
  // (two picks each way). Racks take two tokens each: the strongest
  // preferences choose first, and the split token goes where there is room
  // (rack 1).
  const std::vector<int32_t> picks = {0, 1, 1, 0,  // token 0: rack 0
                                      0, 1, 0, 1,  // token 1: rack 0
                                      2, 3, 3, 2,  // token 2: rack 1
                                      0, 1, 2, 3}; // token 3: split
  // 4 + 4 + 4 + 2 of the 16 picks land in the token's rack.
  CHECK(token_picks_in_rack(plan, topo, picks, 2) == Approx(14.0 / 16));
  // Three tokens in rack 0's experts: one of them must go to rack 1.
  const std::vector<int32_t> crowded = {0, 1, 1, 0, 0, 1, 0, 1,
                                        1, 0, 0, 1, 2, 3, 3, 2};
  CHECK(token_picks_in_rack(plan, topo, crowded, 2) == Approx(12.0 / 16));
}

TEST_CASE("the plan made with the tokens' racks keeps as many of their "
          "picks there as the chained one or more, under the load bound",
          "[placement]") {
  // 4 topics of 16 tokens over 8 experts, 4 layers. At each layer (a
  // shuffle of the experts per layer) topic c's tokens pick from three
  // experts: two of its own and one it shares with topic c+1, so no
  // co-activation cluster is a rack's worth, and pairing the topics two to
  // a rack decides how many picks stay in rack.
  const int64_t L = 4, E = 8, K = 2, V = 64, topics = 4;
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> perm(L, std::vector<int32_t>(E));
  for (auto& p : perm) {
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng);
  }
  std::vector<int32_t> table(V * L * K);
  for (int64_t v = 0; v < V; ++v) {
    const int64_t c = v / (V / topics);
    for (int64_t l = 0; l < L; ++l) {
      const int32_t three[3] = {perm[l][2 * c], perm[l][2 * c + 1],
                                perm[l][(2 * c + 2) % E]};
      const int64_t skip = v % 3; // each token picks two of the three
      int64_t j = 0;
      for (int64_t i = 0; i < 3; ++i)
        if (i != skip)
          table[(v * L + l) * K + j++] = three[i];
    }
  }
  // Routing statistics of 20 tokens of each vocabulary entry.
  const int64_t n = 20 * V;
  std::vector<int32_t> ids(L * n * K);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t k = 0; k < K; ++k)
        ids[(l * n + t) * K + k] = table[((t % V) * L + l) * K + k];
  auto st = routing_stats::zeros(L, E, K);
  REQUIRE(st.add(ids.data(), n));
  const auto topo = topology::regular(2, 2, 1); // 4 ranks, 2 racks
  auto chained = plan_rack_aware(st, topo, {1.1, true});
  auto made = plan_token_affinity(st, topo, table, K, {1.1});
  REQUIRE(chained.ok());
  REQUIRE(made.ok());
  REQUIRE(made.value().check());
  const double before = token_picks_in_rack(chained.value(), topo, table, K);
  const double after = token_picks_in_rack(made.value(), topo, table, K);
  INFO("chained " << before << ", with the tokens' racks " << after);
  CHECK(after >= before);
  CHECK(after >= 0.8);
  const auto cost = evaluate(made.value(), st, topo, 1.0);
  CHECK(cost.imbalance <= 1.1 + 1e-9);

  // Refused: a table of another shape, an expert out of range.
  auto short_table = table;
  short_table.pop_back();
  CHECK_FALSE(plan_token_affinity(st, topo, short_table, K).ok());
  auto bad = table;
  bad[3] = int32_t(E);
  CHECK_THAT(plan_token_affinity(st, topo, bad, K).message(),
             Catch::Contains("is not one of 8"));
}
