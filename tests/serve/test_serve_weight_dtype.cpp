// serve.weight_dtype int8 and bf16, and int8 experts times int8 rows
// (serve.activation_dtype int8): experts converted at load serve the
// same tokens and log-probabilities, to the bit, one request at a time and
// eight at once, on the engine alone and on 1 and 2 expert-parallel ranks;
// their greedy tokens against the float32 model's are reported; /metrics
// names the experts' dtype and kernel. The key's bad values are refused
// naming it.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "serve_requests.hpp"
#include "tutti/serve/serve_memory.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// The experts as served: their weights, and whether int8 ones multiply
// int8 rows.
struct experts_as {
  weight_dtype weights;
  bool int8_rows = false;
};

std::string name_of(experts_as x) {
  return x.int8_rows ? "int8 x int8 rows" : to_string(x.weights);
}

// The jobs served with experts as `x` on `ranks` ranks (0: the engine
// alone), all at once or one after another.
std::vector<served_outcome> serve_as(experts_as x, int64_t ranks,
                                     bool all_at_once,
                                     const std::vector<served_job>& js) {
  auto model = eight_expert_model();
  serve::quantize_experts(model, x.weights);
  if (x.int8_rows)
    REQUIRE(serve::use_int8_rows(model).ok());
  auto svc = serve::service::create(std::move(model), ep_limits(ranks));
  REQUIRE(svc.ok());
  auto& s = *svc.value();
  s.start();
  // /metrics says what the experts are and which kernel runs them.
  const std::string name = to_string(x.weights);
  const std::string kernel = x.int8_rows ? "w8a8" : name;
  const auto metrics = s.metrics().render("m");
  CHECK(metrics.find(x.weights == weight_dtype::fp32
                       ? std::string("dtype=\"fp32\",kernel=\"packed_fp32\"")
                       : "dtype=\"" + name + "\",kernel=\"" + kernel + "_")
        != std::string::npos);
  std::vector<served_outcome> out;
  if (all_at_once) {
    out = serve_all_jobs(s, js);
  } else {
    for (const auto& j : js)
      out.push_back(serve_all_jobs(s, {j}).front());
  }
  s.stop();
  return out;
}

void check_invariant_and_report(experts_as dtype) {
  const auto js = served_jobs(8);
  const auto alone = serve_as(dtype, 1, false, js);
  for (const auto& o : alone)
    CHECK(!o.tokens.empty());
  check_same_outcomes(serve_as(dtype, 1, true, js), alone, js);
  check_same_outcomes(serve_as(dtype, 2, true, js), alone, js);
  check_same_outcomes(serve_as(dtype, 2, false, js), alone, js);
  check_same_outcomes(serve_as(dtype, 0, true, js), alone, js);

  // Against float32 experts, reported: greedy tokens that agree, and the
  // largest log-probability drift before a request's first different one.
  const auto fp32 = serve_as({weight_dtype::fp32}, 1, true, js);
  int64_t same = 0, greedy = 0;
  double drift = 0;
  for (size_t i = 1; i < js.size(); i += 2) {
    bool agreed = true;
    for (size_t t = 0; t < alone[i].tokens.size(); ++t, ++greedy) {
      const bool equal = alone[i].tokens[t] == fp32[i].tokens[t];
      same += equal;
      if (agreed)
        drift = std::max(drift, double(std::abs(alone[i].logprobs[t]
                                                - fp32[i].logprobs[t])));
      agreed = agreed && equal;
    }
  }
  WARN(name_of(dtype) << " experts: greedy tokens as with fp32: " << same
                        << " of " << greedy
                        << ", largest log-probability drift " << drift);
  CHECK(same > 0);
}

} // namespace

TEST_CASE("int8 experts: the same bits at concurrency 1 and 8, on the "
          "engine and at EP 1 and 2",
          "[unit]") {
  auto model = eight_expert_model();
  serve::quantize_experts(model, weight_dtype::int8);
  REQUIRE(model.expert_dtype == weight_dtype::int8);
  CHECK(model.quantized_at_load);
  CHECK(model.layers[0].w13_t[0].is_int8());
  CHECK(model.layers[0].w1.empty()); // the packed copy alone serves
  CHECK(!model.layers[0].q_t.is_int8());
  CHECK(!model.lm_head_t.is_int8());
  CHECK(serve::expert_weights_text(model).find("int8 (quantized at load), "
                                               "kernel ")
        != std::string::npos);
  check_invariant_and_report({weight_dtype::int8});
}

TEST_CASE("int8 experts times int8 rows: the same bits at concurrency 1 "
          "and 8, on the engine and at EP 1 and 2",
          "[unit]") {
  auto model = eight_expert_model();
  // Float experts cannot multiply int8 rows: refused naming the key.
  const auto refused = serve::use_int8_rows(model);
  CHECK(refused.message().find("serve.activation_dtype") != std::string::npos);
  CHECK(refused.message().find("fp32") != std::string::npos);
  serve::quantize_experts(model, weight_dtype::int8);
  REQUIRE(serve::use_int8_rows(model).ok());
  CHECK(model.layers[0].w13_t[0].is_int8_dot());
  CHECK(model.layers[0].w2_t[7].is_int8_dot());
  CHECK(!model.layers[0].q_t.is_int8_dot());
  const auto text = serve::expert_weights_text(model);
  INFO(text);
  CHECK(text.find("int8 (quantized at load), rows int8, kernel ")
        != std::string::npos);
  // What the serve plan counts for such an expert: its codes and scales,
  // and a code sum per output.
  const auto& x = model.layers[0];
  int64_t held = 0;
  for (const auto* p : {&x.w13_t[0], &x.w2_t[0]})
    held += static_cast<int64_t>((p->int8_quads.size() + p->code_sums.size()
                                  + p->scales.size())
                                 * 4);
  const auto& sh = model.shape;
  CHECK(held == serve::expert_weight_bytes(sh, weight_dtype::int8, false)
                  + (2 * sh.intermediate + sh.hidden) * 4);
  for (const char* rows : {"fp32", "int8"}) {
    auto c = serve::parse_serve_config(
      std::string("serve:\n  model: m\n  weight_dtype: int8\n"
                  "  activation_dtype: ")
        + rows + "\n",
      "test");
    REQUIRE(c.ok());
    const auto d = serve::predict_memory(c.value(), sh, weight_dtype::int8,
                                         nullptr);
    REQUIRE(d.size() == 1);
    const int64_t sums = rows == std::string("int8")
                           ? (2 * sh.intermediate + sh.hidden) * 4
                           : 0;
    CHECK(d[0].expert_bytes
          == d[0].experts
               * (serve::expert_weight_bytes(sh, weight_dtype::int8, false)
                  + sums));
  }
  check_invariant_and_report({weight_dtype::int8, true});
}

TEST_CASE("bf16 experts: the same bits at concurrency 1 and 8, on the "
          "engine and at EP 1 and 2",
          "[unit]") {
  auto model = eight_expert_model();
  serve::quantize_experts(model, weight_dtype::bf16);
  REQUIRE(model.expert_dtype == weight_dtype::bf16);
  CHECK(model.quantized_at_load);
  CHECK(model.layers[0].w13_t[0].is_bf16());
  CHECK(model.layers[0].w1.empty());
  CHECK(!model.layers[0].q_t.is_bf16());
  CHECK(!model.lm_head_t.is_bf16());
  const auto text = serve::expert_weights_text(model);
  INFO(text);
  CHECK(text.find("bf16 (quantized at load), kernel ") != std::string::npos);
  // The serve plan's bytes for an expert are what it holds.
  const auto& x = model.layers[0];
  CHECK(serve::expert_weight_bytes(model.shape, weight_dtype::bf16, false)
        == static_cast<int64_t>((x.w13_t[0].bf16_pairs.size()
                                 + x.w2_t[0].bf16_pairs.size())
                                * sizeof(uint32_t)));
  // Quantizing again, to anything, leaves them as they are.
  serve::quantize_experts(model, weight_dtype::int8);
  CHECK(model.expert_dtype == weight_dtype::bf16);
  check_invariant_and_report({weight_dtype::bf16});
}

TEST_CASE("serve.weight_dtype: fp32, int8 or bf16, anything else refused "
          "naming the key",
          "[unit]") {
  CHECK(serve_refusal("  weight_dtype: int8\n").empty());
  CHECK(serve_refusal("  weight_dtype: fp32\n").empty());
  CHECK(serve_refusal("  weight_dtype: bf16\n").empty());
  const auto bad = serve_refusal("  weight_dtype: int4\n");
  CHECK(bad.find("serve.weight_dtype") != std::string::npos);
  CHECK(bad.find("bf16") != std::string::npos);
  CHECK(bad.find('\n') == std::string::npos);
}

TEST_CASE("serve.activation_dtype: fp32 or int8, int8 refused beside bf16 "
          "weights naming the key",
          "[unit]") {
  CHECK(serve_refusal("  activation_dtype: int8\n  weight_dtype: int8\n")
          .empty());
  CHECK(serve_refusal("  activation_dtype: fp32\n").empty());
  for (const char* bad : {"  activation_dtype: int4\n",
                          "  activation_dtype: int8\n  weight_dtype: bf16\n"}) {
    const auto why = serve_refusal(bad);
    INFO(why);
    CHECK(why.find("serve.activation_dtype") != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
  }
}
