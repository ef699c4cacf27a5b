// The serving attention's kernels (invariant_ops.hpp): the scores of many
// keys at once have the bits of invariant_dot key by key, and the weighted
// values of a block of the cache at once have the bits of a position at a
// time, for head dimensions with and without a tail of the vector width;
// the softmax numerators are the C library's exponentials, summed in order.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tutti/kernels/invariant_ops.hpp"

namespace k = tutti::kernels;

namespace {

std::vector<float> uniform_values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = u(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

TEST_CASE("invariant_scores: invariant_dot's bits, key by key", "[unit]") {
  for (int64_t hd : {32, 64, 12}) {
    for (int64_t count : {1, 7, 8, 16, 21}) {
      const int64_t heads = 3, stride = 2 * hd + 5, score_stride = count + 3;
      const auto q = uniform_values(heads * hd, 1);
      const auto keys = uniform_values(count * stride, 2);
      const float scale = 0.17677669f;
      std::vector<float> got(heads * score_stride, -1.0f), want = got;
      k::invariant_scores(q.data(), heads, hd, keys.data(), stride, count,
                          scale, got.data(), score_stride);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < count; ++j)
          want[h * score_stride + j] = k::invariant_dot(
                                         q.data() + h * hd,
                                         keys.data() + j * stride, hd)
                                       * scale;
      INFO("hd " << hd << ", keys " << count);
      CHECK(same_bits(got, want));
    }
  }
}

TEST_CASE("invariant_weighted_values: a block at once, a position's bits",
          "[unit]") {
  for (int64_t hd : {32, 64, 40, 12}) {
    for (int64_t heads : {1, 2, 3, 4, 7}) {
      const int64_t count = 19, stride = hd + 7, weight_stride = count + 2;
      const auto weights = uniform_values(heads * weight_stride, 3);
      const auto values = uniform_values(count * stride, 4);
      const auto start = uniform_values(heads * hd, 5);
      std::vector<float> got = start, want = start;
      // In two blocks, as the engine calls it on the cache's blocks.
      k::invariant_weighted_values(weights.data(), weight_stride, heads,
                                   values.data(), stride, 11, hd, got.data());
      k::invariant_weighted_values(weights.data() + 11, weight_stride, heads,
                                   values.data() + 11 * stride, stride,
                                   count - 11, hd, got.data());
      for (int64_t j = 0; j < count; ++j)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            const float product = weights[h * weight_stride + j]
                                  * values[j * stride + d];
            want[h * hd + d] = want[h * hd + d] + product;
          }
      INFO("hd " << hd << ", heads " << heads);
      CHECK(same_bits(got, want));
    }
  }
}

TEST_CASE("invariant_softmax_numerators: the C library's expf of each "
          "score less its row's largest, each row summed in order",
          "[unit]") {
  for (int64_t n : {1, 5, 8, 13, 16, 177}) {
    const int64_t rows = 11, stride = n + 2; // eight rows at once, and three
    auto scores = uniform_values(rows * stride, 6);
    for (auto& v : scores)
      v *= 30.0f;
    auto got = scores, want = scores;
    std::vector<float> sums(rows), want_sums(rows, 0.0f);
    k::invariant_softmax_numerators(got.data(), rows, n, stride, sums.data());
    for (int64_t r = 0; r < rows; ++r) {
      float* row = want.data() + r * stride;
      const float mx = *std::max_element(row, row + n);
      for (int64_t j = 0; j < n; ++j) {
        row[j] = std::exp(row[j] - mx);
        want_sums[r] = want_sums[r] + row[j];
      }
    }
    INFO("n " << n);
    CHECK(same_bits(got, want)); // the gaps between rows untouched too
    CHECK(same_bits(sums, want_sums));
  }
}

TEST_CASE("invariant_softmax_numerators: expf's bits from 0 down to -110, "
          "its special cases included",
          "[unit]") {
  // A score of 0 first, so the largest is 0 and each numerator is
  // expf(score); every 997th float below zero, to past expf's underflow.
  std::vector<float> scores{0.0f};
  const float lowest = -110.0f;
  uint32_t last;
  std::memcpy(&last, &lowest, sizeof last);
  for (uint64_t bits = 0x80000000u; bits < last; bits += 997) {
    float v;
    const auto u = static_cast<uint32_t>(bits);
    std::memcpy(&v, &u, sizeof v);
    scores.push_back(v);
  }
  auto got = scores;
  float sum;
  k::invariant_softmax_numerators(got.data(), 1,
                                  static_cast<int64_t>(got.size()), 0, &sum);
  int64_t differ = 0;
  for (size_t j = 0; j < scores.size(); ++j) {
    const float want = std::exp(scores[j]);
    differ += std::memcmp(&want, &got[j], sizeof want) != 0;
  }
  INFO(scores.size() << " scores");
  CHECK(differ == 0);
}
