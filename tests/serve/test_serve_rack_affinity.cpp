// serve.rack_affinity: a request starts on a rank of the rack holding most
// of its prompt's experts (the plan's token_experts), serves the same
// tokens as without it (where a request runs never changes its numbers),
// and sends fewer bytes across racks when its tokens' experts are in one
// rack. The key needs serve.racks and a placement, and refuses offload and
// replan.

#include <catch2/catch.hpp>

#include <span>

#include "serve_requests.hpp"
#include "tutti/placement/plan.hpp"
#include "tutti/placement/planner.hpp"
#include "tutti/placement/token_experts.hpp"
#include "tutti/serve/request_affinity.hpp"
#include "tutti/serve/expert_layout.hpp"
#include "tutti/config/serve_config.hpp"

using namespace tutti;
using namespace tutti::testing;

TEST_CASE("a prompt's rack is the one holding most of its tokens' picks",
          "[unit]") {
  // 1 layer, 4 experts on 4 ranks (contiguous), ranks 0-1 in rack 0.
  auto plan = placement::placement_plan::contiguous(1, 4, 4);
  plan.token_top_k = 2;
  plan.token_experts = {0, 1,  // token 0: rack 0 twice
                        2, 3,  // token 1: rack 1 twice
                        0, 3}; // token 2: one each
  auto a = serve::request_affinity::from_plan(plan, {0, 0, 1, 1});
  REQUIRE(a.ok());
  const auto& aff = *a.value();
  CHECK(aff.racks() == 2);
  CHECK(aff.rack_for({0, 0, 2}) == 0);
  CHECK(aff.rack_for({1, 2, 1}) == 1);
  CHECK(aff.rack_for({2}) == 0);      // a tie: the lower rack
  CHECK(aff.rack_for({1, 7, -1}) == 1); // outside the vocabulary: no vote

  auto bare = placement::placement_plan::contiguous(1, 4, 4);
  CHECK_THAT(serve::request_affinity::from_plan(bare, {0, 0, 1, 1}).message(),
             Catch::Contains("no token_experts"));
  CHECK_THAT(serve::request_affinity::from_plan(plan, {0, 1}).message(),
             Catch::Contains("for 4 ranks, serve.racks names 2"));
}

TEST_CASE("serve.rack_affinity: needs racks and a placement, not with "
          "offload, replan or daemons",
          "[unit]") {
  CHECK(serve_refusal("  racks: [a, a, b, b]\n  placement: p.json\n"
                      "  rack_affinity: true\n")
          .empty());
  CHECK_THAT(serve_refusal("  placement: p.json\n  rack_affinity: true\n"),
             Catch::Contains("serve.rack_affinity: needs serve.racks"));
  CHECK_THAT(serve_refusal("  racks: [a, b]\n  rack_affinity: true\n"),
             Catch::Contains("serve.rack_affinity: needs serve.racks"));
  CHECK_THAT(serve_refusal("  racks: [a, b]\n  placement: p.json\n"
                           "  rack_affinity: 2\n"),
             Catch::Contains("serve.rack_affinity"));
  CHECK_THAT(serve_refusal("  racks: [a, b]\n  placement: p.json\n"
                           "  rack_affinity: true\n  offload: {stats: s.json, "
                           "threshold: 0.1, rank: 1}\n"),
             Catch::Contains("not with serve.offload"));
  CHECK_THAT(
    serve_refusal("  racks: [a, b]\n  placement: p.json\n"
                  "  rack_affinity: true\n  replan: {max_cross_rack_share: "
                  "0.5}\n"),
    Catch::Contains("serve.replan: not with serve.rack_affinity"));
  CHECK_THAT(
    serve_refusal("  nodes: [10.0.0.1, 10.0.0.2]\n  rendezvous_port: 29000\n"
                  "  racks: [a, b]\n  placement: p.json\n"
                  "  rack_affinity: true\n"),
    Catch::Contains("serve.rack_affinity: across daemons needs "
                    "serve.data_parallel_attention"));
  CHECK(
    serve_refusal("  nodes: [10.0.0.1, 10.0.0.2]\n  rendezvous_port: 29000\n"
                  "  racks: [a, b]\n  placement: p.json\n"
                  "  data_parallel_attention: true\n  rack_affinity: true\n")
      .empty());
  CHECK_THAT(serve_refusal("  data_parallel_attention: true\n"),
             Catch::Contains("serve.data_parallel_attention: needs "
                             "serve.nodes"));
  CHECK_THAT(
    serve_refusal("  nodes: [10.0.0.1, 10.0.0.2]\n  rendezvous_port: 29000\n"
                  "  data_parallel_attention: true\n  racks: [a, b]\n"
                  "  replan: {max_cross_rack_share: 0.5}\n"),
    Catch::Contains("serve.replan: not with "
                    "serve.data_parallel_attention"));
}

namespace {

// eight_expert_model's own picks for each token on its own.
std::vector<int32_t> model_token_experts() {
  const auto cfg = serve_test_config(64, 32, 48, 2, 4, 2, 8, 2, 96);
  const auto tensors = random_model_tensors(cfg, 41); // eight_expert_model's
  placement::token_model tm;
  tm.vocab = cfg.model.vocab_size;
  tm.hidden = cfg.model.hidden_size;
  tm.intermediate = cfg.model.intermediate_size;
  tm.layers = cfg.model.num_hidden_layers;
  tm.heads = cfg.model.num_attention_heads;
  tm.kv_heads = cfg.model.num_key_value_heads;
  tm.experts = cfg.moe.num_experts;
  tm.top_k = cfg.moe.router_top_k;
  tm.rms_norm_eps = cfg.model.rms_norm_eps;
  tm.tensor = [&](const std::string& name) -> std::span<const float> {
    auto at = tensors.find(name);
    return at == tensors.end() ? std::span<const float>()
                               : std::span<const float>(at->second);
  };
  auto out = placement::experts_per_token(tm);
  REQUIRE(out.ok());
  return out.value();
}

struct affinity_run {
  std::vector<served_outcome> outcomes;
  int64_t inter_rack = 0, by_affinity = 0, elsewhere = 0;
};

affinity_run serve_with(std::shared_ptr<const serve::request_affinity> a,
                        std::shared_ptr<const serve::expert_layout> layout,
                        const std::vector<served_job>& js) {
  auto l = ep_limits(4);
  l.replan.rack = {0, 0, 1, 1}; // measured only
  l.layout = std::move(layout);
  l.affinity = std::move(a);
  auto svc = start_service(l);
  auto& s = *svc;
  REQUIRE(s.shards_up());
  affinity_run out;
  out.outcomes = serve_all_jobs(s, js);
  s.stop();
  out.inter_rack = s.metrics().gauges().all_to_all_link_bytes[static_cast<int>(
    serve::link_class::inter_rack)];
  out.by_affinity = s.placed_by_affinity();
  out.elsewhere = s.placed_elsewhere();
  // /metrics says the same.
  const auto g = s.metrics().gauges();
  CHECK(g.placed_by_affinity == out.by_affinity);
  CHECK(g.placed_elsewhere == out.elsewhere);
  CHECK_THAT(s.metrics().render("m"),
             Catch::Contains("tutti_serve_requests_placed_total{model=\"m\","
                             "by=\"affinity\"} "
                             + std::to_string(out.by_affinity)));
  return out;
}

} // namespace

TEST_CASE("requests start in their prompt's rack: the same tokens, fewer "
          "bytes across racks",
          "[integration]") {
  // The plan made for the model's tokens (as `tutti placement plan
  // --method affinity` makes it), from statistics of each token once.
  const auto table = model_token_experts();
  const int64_t L = 2, E = 8, K = 2, V = 64;
  std::vector<int32_t> ids(L * V * K);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t k = 0; k < K; ++k)
        ids[(l * V + v) * K + k] = table[(v * L + l) * K + k];
  auto st = placement::routing_stats::zeros(L, E, K);
  REQUIRE(st.add(ids.data(), V));
  auto made = placement::plan_token_affinity(
    st, placement::topology::regular(2, 2, 1), table, K, {1.5});
  REQUIRE(made.ok());
  auto plan = made.value();
  plan.token_top_k = K;
  plan.token_experts = table;
  auto a = serve::request_affinity::from_plan(plan, {0, 0, 1, 1});
  REQUIRE(a.ok());
  // Prompts of tokens with at least 3 of their 4 picks in one rack, half
  // of them each rack's.
  const auto slot_of = plan.slot_of();
  std::vector<int32_t> of_rack[2];
  for (int32_t v = 0; v < V; ++v) {
    int64_t in0 = 0;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t k = 0; k < K; ++k)
        in0 += slot_of[l * E + table[(v * L + l) * K + k]] < E / 2 ? 1 : 0;
    if (in0 >= 3)
      of_rack[0].push_back(v);
    else if (in0 <= 1)
      of_rack[1].push_back(v);
  }
  INFO("tokens of rack 0: " << of_rack[0].size() << ", of rack 1: "
                            << of_rack[1].size());
  REQUIRE(of_rack[0].size() >= 2);
  REQUIRE(of_rack[1].size() >= 2);
  auto js = served_jobs(16);
  for (size_t i = 0; i < js.size(); ++i) {
    const auto& pool = of_rack[i % 2];
    for (size_t t = 0; t < js[i].prompt.size(); ++t)
      js[i].prompt[t] = pool[(i + 3 * t) % pool.size()];
  }
  auto layout = std::make_shared<const serve::expert_layout>(
    serve::expert_layout::from_plan(plan));
  const auto spread = serve_with(nullptr, layout, js);
  const auto kept = serve_with(a.value(), layout, js);
  check_same_outcomes(kept.outcomes, spread.outcomes, js);
  CHECK(kept.by_affinity + kept.elsewhere == int64_t(js.size()));
  CHECK(kept.by_affinity > kept.elsewhere);
  INFO("inter-rack bytes: spread " << spread.inter_rack << ", by affinity "
                                   << kept.inter_rack);
  CHECK(kept.inter_rack < spread.inter_rack);
}
