#include "tutti/data/topic_source.hpp"

#include <cmath>
#include <random>
#include <string>

#include "rng.hpp"

namespace tutti::data {

expected<topic_source> topic_source::random(std::uint32_t vocab,
                                            std::uint32_t topics,
                                            double switch_prob,
                                            std::uint64_t seed) {
  if (topics < 2)
    return status::error("topic_source: topics must be >= 2, got "
                         + std::to_string(topics));
  if (vocab / topics < 2)
    return status::error("topic_source: vocab " + std::to_string(vocab)
                         + " gives fewer than 2 tokens to each of "
                         + std::to_string(topics) + " topics");
  if (!(switch_prob > 0.0 && switch_prob < 1.0))
    return status::error("topic_source: switch probability must be in (0, 1)");
  topic_source s;
  s.vocab_ = vocab;
  s.switch_prob_ = switch_prob;
  double mean_h = 0;
  for (std::uint32_t t = 0; t < topics; ++t) {
    const std::uint32_t size = s.first_token_of(t + 1, vocab, topics)
                               - s.first_token_of(t, vocab, topics);
    auto chain = markov_source::random(
      size, detail::derive_seed(seed, {0x746f706963ULL, t}), // "topic"
      std::min<std::uint32_t>(4, size));
    if (!chain.ok())
      return status::error("topic " + std::to_string(t) + ": "
                           + chain.message());
    mean_h += chain.value().entropy_rate() / topics;
    s.chains_.push_back(std::move(chain.value()));
  }
  const double p = switch_prob;
  s.entropy_rate_ = -p * std::log(p) - (1 - p) * std::log1p(-p)
                    + p * std::log(double(topics - 1)) + mean_h;
  return s;
}

std::int32_t topic_source::first_token_of(std::uint32_t topic,
                                          std::uint32_t vocab,
                                          std::uint32_t topics) {
  return static_cast<std::int32_t>(std::uint64_t(vocab) * topic / topics);
}

std::int32_t topic_source::first_token(std::uint32_t topic) const {
  return first_token_of(topic, vocab_, topics());
}

std::uint32_t topic_source::topic_of(std::int32_t token) const {
  // The largest t with first_token(t) <= token.
  std::uint32_t t = static_cast<std::uint32_t>(std::uint64_t(token) * topics()
                                               / vocab_);
  while (t + 1 < topics() && first_token(t + 1) <= token)
    ++t;
  while (t > 0 && first_token(t) > token)
    --t;
  return t;
}

std::vector<std::int32_t> topic_source::generate(std::uint64_t n,
                                                 std::uint64_t seed) const {
  std::mt19937_64 rng(detail::derive_seed(seed, {0x746f70696373ULL}));
  const std::uint32_t T = topics();
  // Each topic's context (two local tokens), drawn once, kept across visits.
  std::vector<std::int32_t> a(T), b(T);
  for (std::uint32_t t = 0; t < T; ++t) {
    a[t] = std::int32_t(detail::uniform_below(rng, chains_[t].vocab()));
    b[t] = std::int32_t(detail::uniform_below(rng, chains_[t].vocab()));
  }
  std::uint32_t topic = std::uint32_t(detail::uniform_below(rng, T));
  std::vector<std::int32_t> out;
  out.reserve(n);
  while (out.size() < n) {
    if (!out.empty() && detail::uniform_open01(rng) < switch_prob_) {
      const auto other = std::uint32_t(detail::uniform_below(rng, T - 1));
      topic = other < topic ? other : other + 1;
    }
    const auto next = chains_[topic].successors(a[topic], b[topic]);
    double u = detail::uniform_open01(rng);
    std::int32_t c = next.back().token;
    for (const successor& s : next) {
      if (u < s.prob) {
        c = s.token;
        break;
      }
      u -= s.prob;
    }
    a[topic] = b[topic];
    b[topic] = c;
    out.push_back(first_token(topic) + c);
  }
  return out;
}

} // namespace tutti::data
