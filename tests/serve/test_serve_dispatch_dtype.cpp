// serve.dispatch_dtype int8 / fp8: a replica of 1, 2 and 4 ranks (flat,
// in-process runs, and the rack relays) serves the same greedy and seeded
// requests with the same tokens and log-probabilities, to the bit; the
// dispatch's bytes are (d + 4) / 4d of float32's; the engine alone (no
// exchange) and an unknown dtype are refused, naming the key.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "serve_requests.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

struct served_run {
  std::vector<served_outcome> outcomes;
  int64_t bytes = 0;
};

served_run serve_with(dispatch_dtype dtype, int64_t ranks,
                      const std::vector<served_job>& js,
                      bool rack_aware = false) {
  auto l = ep_limits(ranks);
  l.dispatch = dtype;
  if (rack_aware) {
    l.replan.rack = {0, 0, 1, 1};
    l.rack_aware_alltoall = true;
  }
  auto svc = start_service(l);
  REQUIRE(svc->shards_up());
  served_run out;
  out.outcomes = serve_all_jobs(*svc, js);
  out.bytes = svc->ranks()->exchanged_bytes();
  svc->stop();
  return out;
}

} // namespace

TEST_CASE("8-bit dispatch: the same tokens at every EP size, a quarter of "
          "the dispatch's bytes",
          "[unit]") {
  const auto js = served_jobs(8);
  const auto fp32 = serve_with(dispatch_dtype::fp32, 2, js);
  for (auto dtype : {dispatch_dtype::int8, dispatch_dtype::fp8}) {
    INFO(to_string(dtype));
    const auto one = serve_with(dtype, 1, js);
    for (const auto& o : one.outcomes)
      CHECK(!o.tokens.empty());
    check_same_outcomes(serve_with(dtype, 2, js).outcomes, one.outcomes, js);
    check_same_outcomes(serve_with(dtype, 4, js, true).outcomes, one.outcomes,
                        js);
    const auto two = serve_with(dtype, 2, js);
    // Greedy requests against fp32 dispatch, reported, not bounded: the
    // tokens that agree, and the log-probabilities' largest drift over
    // each request's positions up to its first different token.
    int64_t same = 0, greedy = 0;
    double drift = 0;
    for (size_t i = 1; i < js.size(); i += 2) {
      bool agreed = true;
      for (size_t t = 0; t < one.outcomes[i].tokens.size(); ++t, ++greedy) {
        const bool equal = one.outcomes[i].tokens[t]
                           == fp32.outcomes[i].tokens[t];
        same += equal;
        if (agreed)
          drift = std::max(drift,
                           double(std::abs(one.outcomes[i].logprobs[t]
                                           - fp32.outcomes[i].logprobs[t])));
        agreed = agreed && equal;
      }
    }
    WARN(to_string(dtype) << ": greedy tokens as with fp32 dispatch: " << same
                          << " of " << greedy
                          << ", largest log-probability drift " << drift);
    // Every step's rows go out (dispatch) and come back (combine, fp32):
    // the same rows in both runs (every request runs to its length).
    const double hidden = 32, ratio = (hidden + 4) / (4 * hidden);
    CHECK(double(two.bytes - fp32.bytes / 2)
          == Approx(double(fp32.bytes / 2) * ratio).epsilon(1e-12));
  }
}

TEST_CASE("8-bit dispatch needs the ranks; an unknown dtype is refused",
          "[unit]") {
  auto l = ep_limits(0);
  l.dispatch = dispatch_dtype::int8;
  auto svc = serve::service::create(eight_expert_model(), l);
  REQUIRE_FALSE(svc.ok());
  CHECK(svc.message().find("serve.dispatch_dtype int8") != std::string::npos);
  const auto refusal = serve_refusal("  dispatch_dtype: int4\n");
  INFO(refusal);
  CHECK(refusal.find("serve.dispatch_dtype") != std::string::npos);
  CHECK(refusal.find("fp32, int8 or fp8") != std::string::npos);
}
