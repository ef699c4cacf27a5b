#pragma once
// A synthetic language with a known answer: a random order-2 Markov chain
// over V tokens, P(c | a, b), whose exact entropy rate H (nats/token) is the
// lowest loss any model can reach on text it generates. A training run's loss
// curve can then be read against H instead of against guesses.
//
// Everything is a pure function of the seed. The random draws are identical
// on every platform (mt19937_64 plus our own conversions); probabilities go
// through std::log / std::pow, so another libm could move their last bits,
// and with them H's last digits (a generated token only in a freak tie).
// Memory is ~20 bytes per (context, successor) and the entropy rate costs
// O(V^2 * branching) per power iteration: V = 1024, branching 4 is ~90 MB
// and ~5 s (a few hundred iterations); V = 256 well under a second.

#include <cstdint>
#include <span>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::data {

struct successor {
  std::int32_t token;
  double prob;
};

class markov_source {
public:
  markov_source() = default;

  // Random sparse chain: each context (a,b) has `branching` distinct
  // successors (2 <= branching <= vocab) with uneven random probabilities
  // (normalized Exp(1) draws raised to `unevenness`). The successor sets are
  // built so the chain is irreducible and aperiodic (see the .cpp), which
  // makes the entropy rate well defined and generated text ergodic.
  static expected<markov_source> random(std::uint32_t vocab, std::uint64_t seed,
                                        std::uint32_t branching = 4,
                                        double unevenness = 2.0);

  // Hand-built chain, e.g. for tests: table[a * vocab + b] lists P(. | a, b).
  // Each row's probabilities must be positive and sum to 1 (within 1e-9),
  // and every pair state must reach every other (so H is unique).
  static expected<markov_source> from_table(
    std::uint32_t vocab, std::vector<std::vector<successor>> table);

  std::uint32_t vocab() const { return vocab_; }
  // Exact entropy rate in nats/token, computed at construction.
  double entropy_rate() const { return entropy_rate_; }
  // P(c | a, b); 0 when c is not a successor of (a, b).
  double prob(std::int32_t a, std::int32_t b, std::int32_t c) const;
  std::span<const successor> successors(std::int32_t a, std::int32_t b) const;

  // n tokens; the first two are a start state drawn uniformly from `seed`.
  std::vector<std::int32_t> generate(std::uint64_t n, std::uint64_t seed) const;

private:
  status check_strongly_connected() const;
  status compute_entropy_rate();

  std::uint32_t vocab_ = 0;
  // Compressed rows: context a * vocab + b owns successors_[row_begin_[ctx],
  // row_begin_[ctx + 1]). One flat array instead of V^2 small vectors.
  std::vector<std::uint64_t> row_begin_;
  std::vector<successor> successors_;
  double entropy_rate_ = 0.0;
};

} // namespace tutti::data
