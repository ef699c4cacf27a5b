#pragma once
// Synthetic text with topics: T order-2 Markov chains (markov_source), each
// over its own disjoint slice of the vocabulary, and a stream that stays in
// one topic and switches to another (uniform over the others) with a small
// probability per token. A router trained on it sees groups of tokens that
// always travel together, so its experts co-activate in groups: the data
// that expert placement is measured on.
//
// Topic t owns tokens [V*t/T, V*(t+1)/T). Each chain keeps its own context
// across visits (a topic resumes where it left off), so a token names its
// topic and the entropy rate stays exact:
//   H = h(p) + p*log(T-1) + mean_t H_t,
// h the binary entropy of the switch probability p, H_t topic t's chain
// (topics are visited uniformly in the long run, and a topic's context when
// it is entered again is distributed as its own chain's stationary law).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/data/markov_source.hpp"

namespace tutti::data {

class topic_source {
public:
  // 2 <= topics, every topic at least 2 tokens, 0 < switch_prob < 1.
  static expected<topic_source> random(std::uint32_t vocab,
                                       std::uint32_t topics, double switch_prob,
                                       std::uint64_t seed);

  std::uint32_t vocab() const { return vocab_; }
  std::uint32_t topics() const { return std::uint32_t(chains_.size()); }
  double entropy_rate() const { return entropy_rate_; }
  // The topic a token belongs to.
  std::uint32_t topic_of(std::int32_t token) const;
  std::int32_t first_token(std::uint32_t topic) const;
  double switch_prob() const { return switch_prob_; }
  // Topic t's chain, over local ids (token - first_token(t)).
  const markov_source& chain(std::uint32_t topic) const {
    return chains_[topic];
  }

  // n tokens, a pure function of (this source, seed).
  std::vector<std::int32_t> generate(std::uint64_t n, std::uint64_t seed) const;

private:
  static std::int32_t first_token_of(std::uint32_t topic, std::uint32_t vocab,
                                     std::uint32_t topics);

  std::uint32_t vocab_ = 0;
  double switch_prob_ = 0;
  std::vector<markov_source> chains_; // over local token ids
  double entropy_rate_ = 0;
};

} // namespace tutti::data
