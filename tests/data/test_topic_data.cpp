// tutti data synth --topics: topic data is a pure function of its seed, each
// topic keeps to its own slice of the vocabulary, topics switch at the
// configured rate, and the stated entropy rate is what the true model's
// log-loss on generated text converges to.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "tutti/data/dataset.hpp"
#include "tutti/data/synth.hpp"
#include "tutti/data/topic_source.hpp"
#include "tutti/store/atomic_file.hpp"

#include "data_test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti;
using namespace tutti::data;
using namespace tutti::testing;

TEST_CASE("topic data is deterministic and written as a dataset", "[topics]") {
  temp_dir one("a"), two("b"), other("c");
  REQUIRE(synth_topic_dataset(one.path, 64, 4, 0.01, 7, 20000, 0.1, 2));
  REQUIRE(synth_topic_dataset(two.path, 64, 4, 0.01, 7, 20000, 0.1, 2));
  REQUIRE(synth_topic_dataset(other.path, 64, 4, 0.01, 8, 20000, 0.1, 2));
  check_deterministic(
    one.path, two.path, other.path,
    {"train-00000.tok", "train-00001.tok", "val-00000.tok", "meta.json"});
  auto meta = read_meta(one.path);
  REQUIRE(meta.ok());
  CHECK(meta.value().source == "topics");
  CHECK(meta.value().topics == 4);
  CHECK(meta.value().topic_switch_prob == 0.01);
  REQUIRE(meta.value().entropy_rate_nats);
  CHECK(*meta.value().entropy_rate_nats
        == topic_source::random(64, 4, 0.01, 7).value().entropy_rate());

  CHECK_THAT(synth_topic_dataset(one.path, 64, 1, 0.01, 7, 100).message(),
             Catch::Contains("topics must be >= 2"));
  CHECK_THAT(synth_topic_dataset(one.path, 6, 4, 0.01, 7, 100).message(),
             Catch::Contains("fewer than 2 tokens"));
  CHECK_THAT(synth_topic_dataset(one.path, 64, 4, 0.0, 7, 100).message(),
             Catch::Contains("switch probability"));
}

TEST_CASE("topics own disjoint vocabulary slices and switch rarely",
          "[topics]") {
  const std::uint32_t V = 96, T = 3;
  const double p = 0.005;
  auto src = topic_source::random(V, T, p, 3);
  REQUIRE(src.ok());
  const auto& s = src.value();
  // The slices tile the vocabulary.
  CHECK(s.first_token(0) == 0);
  for (std::int32_t tok = 0; tok < std::int32_t(V); ++tok) {
    const auto t = s.topic_of(tok);
    CHECK(s.first_token(t) <= tok);
    CHECK((t + 1 == T || tok < s.first_token(t + 1)));
  }
  const std::uint64_t n = 200000;
  const auto text = s.generate(n, 11);
  REQUIRE(text.size() == n);

  // Switches happen at rate p; each topic holds about a third of the text.
  std::uint64_t switches = 0;
  std::vector<std::uint64_t> per_topic(T, 0);
  for (std::uint64_t i = 0; i < n; ++i) {
    per_topic[s.topic_of(text[i])] += 1;
    if (i > 0 && s.topic_of(text[i]) != s.topic_of(text[i - 1]))
      ++switches;
  }
  CHECK(std::abs(double(switches) / n - p) < p * 0.25);
  for (auto c : per_topic)
    CHECK(std::abs(double(c) / n - 1.0 / T) < 0.1);

  // The true model's mean log-loss approaches the stated entropy rate. Each
  // topic's context is known once two of its tokens have been seen.
  std::vector<std::int32_t> a(T, -1), b(T, -1);
  double nll = 0;
  std::uint64_t scored = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto t = s.topic_of(text[i]);
    const std::int32_t local = text[i] - s.first_token(t);
    if (i > 0 && a[t] >= 0) {
      const bool stayed = s.topic_of(text[i - 1]) == t;
      nll -= stayed ? std::log1p(-p) : std::log(p / (T - 1));
      nll -= std::log(s.chain(t).prob(a[t], b[t], local));
      ++scored;
    }
    a[t] = b[t];
    b[t] = local;
  }
  REQUIRE(scored > n - 100);
  CHECK(std::abs(nll / double(scored) - s.entropy_rate()) < 0.02);
}
