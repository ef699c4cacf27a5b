// DeepSeek-V3's router (scoring_func sigmoid) through the kernel calls
// training and serving make: the chosen experts and gates against an
// independent float64 implementation of Hugging Face's DeepseekV3TopkRouter,
// written here from its published code, and the gradient against central
// finite differences.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "tutti/kernels/ops.hpp"

#include "gradcheck_support.hpp"
#include "kernel_inputs.hpp"

namespace k = tutti::kernels;
using Vec = std::vector<double>;
using Idx = std::vector<int32_t>;
using tutti::testing::randn;
using tutti::testing::rel_err;

namespace {

const k::stream S = k::cpu_stream();

struct router_setup {
  int64_t experts, k, n_group, topk_group;
  bool normalize;
  double scale;
};

// Indices of v best-first; ties to the lower index (tutti's rule; torch.topk
// leaves ties unspecified).
std::vector<int64_t> ranked(const Vec& v) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  return order;
}

// HF's get_topk_indices and forward for one token, step by step: scores =
// sigmoid(logits); scores_for_choice = scores + bias; group_scores = the
// sum of each group's top 2; keep topk_group groups; top-k experts among
// them (the dropped groups masked out entirely); gates = scores at those,
// / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor.
void hf_route(const double* logits, const Vec& bias, const router_setup& r,
              Idx& idx, Vec& gate) {
  const int64_t per = r.experts / r.n_group;
  Vec scores(r.experts), choice(r.experts);
  for (int64_t e = 0; e < r.experts; ++e) {
    scores[e] = 1.0 / (1.0 + std::exp(-logits[e]));
    choice[e] = scores[e] + bias[e];
  }
  Vec group_scores(r.n_group);
  for (int64_t g = 0; g < r.n_group; ++g) {
    Vec members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(members.begin(), members.end(), std::greater<>());
    group_scores[g] = members[0] + (per > 1 ? members[1] : 0.0);
  }
  const auto groups = ranked(group_scores);
  std::vector<bool> kept(r.n_group, false);
  for (int64_t i = 0; i < r.topk_group; ++i)
    kept[groups[i]] = true;
  for (int64_t e = 0; e < r.experts; ++e)
    if (!kept[e / per])
      choice[e] = -INFINITY;
  const auto experts = ranked(choice);
  idx.assign(experts.begin(), experts.begin() + r.k);
  gate.resize(r.k);
  double sum = 0.0;
  for (int64_t j = 0; j < r.k; ++j)
    sum += gate[j] = scores[idx[j]];
  for (int64_t j = 0; j < r.k; ++j)
    gate[j] = (r.normalize ? gate[j] / (sum + 1e-20) : gate[j]) * r.scale;
}

void tutti_route(const Vec& logits, const Vec& bias, const router_setup& r,
                 int64_t n, Idx& idx, Vec& gate) {
  idx.assign(n * r.k, -1);
  gate.assign(n * r.k, 0.0);
  k::router_sigmoid_forward(S, logits.data(), bias.data(), idx.data(),
                            gate.data(), n, r.experts, r.k, r.n_group,
                            r.topk_group, r.normalize, r.scale);
}

double logit_of(double p) { return std::log(p / (1.0 - p)); }

} // namespace

TEST_CASE("sigmoid routing equals Hugging Face's DeepseekV3TopkRouter",
          "[kernels][router]") {
  std::mt19937_64 rng(31);
  const int64_t n = 64;
  const router_setup setups[] = {
    {16, 4, 4, 2, true, 2.5},  // DeepSeek-V3's proportions, small
    {16, 3, 8, 3, false, 1.0}, // groups of two, gates not renormalised
    {12, 2, 1, 1, true, 1.0},  // no groups
    {12, 2, 12, 4, true, 1.5}, // groups of one expert
  };
  for (const auto& r : setups) {
    INFO("experts " << r.experts << " k " << r.k << " n_group " << r.n_group
                    << " topk_group " << r.topk_group);
    const Vec logits = randn(n * r.experts, rng, 2.0);
    Vec bias = randn(r.experts, rng, 0.3); // negative ones too
    Idx idx, ungrouped_idx;
    Vec gate, ungrouped_gate;
    tutti_route(logits, bias, r, n, idx, gate);
    router_setup flat = r;
    flat.n_group = flat.topk_group = 1;
    tutti_route(logits, bias, flat, n, ungrouped_idx, ungrouped_gate);
    int64_t limited = 0;
    for (int64_t t = 0; t < n; ++t) {
      Idx want;
      Vec want_gate;
      hf_route(logits.data() + t * r.experts, bias, r, want, want_gate);
      for (int64_t j = 0; j < r.k; ++j) {
        CHECK(idx[t * r.k + j] == want[j]);
        CHECK(std::abs(gate[t * r.k + j] - want_gate[j]) <= 1e-14);
      }
      limited += !std::equal(want.begin(), want.end(),
                             ungrouped_idx.begin() + t * r.k);
    }
    // The group limit decided some tokens' experts, where it can (groups
    // of one expert keep the k best experts anyway).
    if (r.topk_group < r.n_group && r.experts / r.n_group > 1)
      CHECK(limited > 0);
  }
}

TEST_CASE("the group limit changes the choice: the best pair wins over the "
          "best single expert",
          "[kernels][router]") {
  // Groups of two; the best expert (0) sits in a group whose second is weak,
  // the next two (2, 3) share a group. One group kept: experts 2 and 3.
  const Vec p = {0.95, 0.10, 0.80, 0.75, 0.20, 0.15, 0.30, 0.05};
  Vec logits(p.size());
  for (size_t e = 0; e < p.size(); ++e)
    logits[e] = logit_of(p[e]);
  const Vec bias(p.size(), 0.0);
  Idx idx;
  Vec gate;
  tutti_route(logits, bias, {8, 2, 4, 1, true, 1.0}, 1, idx, gate);
  CHECK(idx == Idx{2, 3});
  CHECK(std::abs(gate[0] - 0.80 / 1.55) < 1e-12);
  tutti_route(logits, bias, {8, 2, 1, 1, true, 1.0}, 1, idx, gate);
  CHECK(idx == Idx{0, 2});
  // The bias moves the choice, never the gates: +0.7 on expert 1 makes
  // group 0 the best pair (0.95 + 0.80), gated by 0.95 and 0.10.
  Vec lifted = bias;
  lifted[1] = 0.7;
  Idx want;
  Vec want_gate;
  hf_route(logits.data(), lifted, {8, 2, 4, 1, false, 2.0}, want, want_gate);
  tutti_route(logits, lifted, {8, 2, 4, 1, false, 2.0}, 1, idx, gate);
  CHECK(idx == Idx{0, 1});
  CHECK(idx == want);
  CHECK(std::abs(gate[1] - 0.20) < 1e-12);
  CHECK(std::abs(gate[1] - want_gate[1]) < 1e-15);
}

TEST_CASE("sigmoid routing breaks ties towards the lower index",
          "[kernels][router]") {
  // All scores equal: groups 0 and 1 kept, experts 0 and 1 chosen.
  const Vec logits(8, 0.25), bias(8, 0.0);
  Idx idx;
  Vec gate;
  tutti_route(logits, bias, {8, 3, 4, 2, true, 1.0}, 1, idx, gate);
  CHECK(idx == Idx{0, 1, 2});
  for (double g : gate)
    CHECK(std::abs(g - 1.0 / 3.0) < 1e-15);
}

TEST_CASE("gradcheck sigmoid routing through the gates",
          "[kernels][gradcheck]") {
  std::mt19937_64 rng(32);
  const int64_t n = 6;
  for (const router_setup r : {router_setup{8, 3, 4, 2, true, 2.5},
                               router_setup{8, 3, 2, 1, false, 1.5}}) {
    INFO("normalize " << r.normalize);
    Vec logits = randn(n * r.experts, rng), G = randn(n * r.k, rng);
    const Vec bias = randn(r.experts, rng, 0.2);
    Idx idx;
    Vec gate;
    tutti_route(logits, bias, r, n, idx, gate);
    auto loss = [&] {
      Idx i2;
      Vec g2;
      tutti_route(logits, bias, r, n, i2, g2);
      REQUIRE(i2 == idx); // the perturbation must not change the choice
      return tutti::testing::dot(G, g2);
    };
    Vec dl(n * r.experts, 7.0); // overwritten, not accumulated
    k::router_sigmoid_backward(S, idx.data(), logits.data(), G.data(),
                               dl.data(), n, r.experts, r.k, r.normalize,
                               r.scale);
    tutti::testing::check_grad("router_sigmoid_backward", dl, logits, loss);
  }
}
