#include "tutti/data/markov_source.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "rng.hpp"

namespace tutti::data {
namespace {

// Order-2 de Bruijn sequence over {0..V-1}: a cyclic sequence of length V^2
// in which every pair (a, b) occurs exactly once. Built as the concatenation,
// in lexicographic order, of the Lyndon words of length 1 and 2:
// 0, 01, 02, ..., 0(V-1), 1, 12, ..., (V-1).
std::vector<std::int32_t> de_bruijn_order2(std::int32_t v) {
  std::vector<std::int32_t> s;
  s.reserve(static_cast<std::size_t>(v) * v);
  for (std::int32_t i = 0; i < v; ++i) {
    s.push_back(i);
    for (std::int32_t j = i + 1; j < v; ++j) {
      s.push_back(i);
      s.push_back(j);
    }
  }
  return s;
}

} // namespace

expected<markov_source> markov_source::random(std::uint32_t vocab,
                                              std::uint64_t seed,
                                              std::uint32_t branching,
                                              double unevenness) {
  // The table holds vocab^2 contexts: 4096 with branching 4 is already ~1.3 GB.
  if (vocab < 2 || vocab > 4096)
    return status::error("markov_source: vocab must be in [2, 4096], got "
                         + std::to_string(vocab));
  if (branching < 2 || branching > vocab)
    return status::error("markov_source: branching must be in [2, vocab="
                         + std::to_string(vocab) + "], got "
                         + std::to_string(branching));
  if (!(unevenness > 0.0) || !std::isfinite(unevenness))
    return status::error("markov_source: unevenness must be positive");

  std::mt19937_64 rng(detail::derive_seed(seed, {0x6d61726b6f76ULL}));
  const auto v = static_cast<std::int32_t>(vocab);
  const std::uint64_t contexts = std::uint64_t{vocab} * vocab;

  // Irreducible by construction: the pair graph (a,b) -> (b,c) contains the
  // Hamiltonian cycle of a de Bruijn sequence (relabelled by a random token
  // permutation so it carries no visible pattern), because every context
  // keeps its de Bruijn successor. Aperiodic, so generated text forgets its
  // start state: one context (x,x) also keeps the successor x, a self-loop
  // of the pair chain.
  std::vector<std::int32_t> label(vocab);
  for (std::int32_t i = 0; i < v; ++i)
    label[i] = i;
  for (std::uint64_t i = vocab - 1; i > 0; --i)
    std::swap(label[i], label[detail::uniform_below(rng, i + 1)]);
  const std::vector<std::int32_t> cycle = de_bruijn_order2(v);
  std::vector<std::int32_t> cycle_next(contexts);
  for (std::uint64_t i = 0; i < contexts; ++i) {
    const std::int32_t a = label[cycle[i]],
                       b = label[cycle[(i + 1) % contexts]];
    cycle_next[std::uint64_t(a) * vocab + b] = label[cycle[(i + 2) % contexts]];
  }
  const std::int32_t loop_token = label[0];

  markov_source m;
  m.vocab_ = vocab;
  m.row_begin_.resize(contexts + 1);
  m.successors_.reserve(contexts * branching);
  std::vector<double> weight(branching);
  for (std::uint64_t ctx = 0; ctx < contexts; ++ctx) {
    m.row_begin_[ctx] = m.successors_.size();
    const auto row = m.successors_.size();
    auto add_distinct = [&](std::int32_t token) {
      for (auto i = row; i < m.successors_.size(); ++i)
        if (m.successors_[i].token == token)
          return;
      m.successors_.push_back({token, 0.0});
    };
    add_distinct(cycle_next[ctx]);
    if (ctx == std::uint64_t(loop_token) * vocab + loop_token)
      add_distinct(loop_token);
    while (m.successors_.size() - row < branching)
      add_distinct(
        static_cast<std::int32_t>(detail::uniform_below(rng, vocab)));

    double total = 0.0;
    for (std::uint32_t k = 0; k < branching; ++k) {
      weight[k] = std::pow(-std::log(detail::uniform_open01(rng)), unevenness);
      total += weight[k];
    }
    for (std::uint32_t k = 0; k < branching; ++k)
      m.successors_[row + k].prob = weight[k] / total;
  }
  m.row_begin_[contexts] = m.successors_.size();

  TUTTI_RETURN_IF_ERROR(m.compute_entropy_rate());
  return m;
}

expected<markov_source> markov_source::from_table(
  std::uint32_t vocab, std::vector<std::vector<successor>> table) {
  const std::uint64_t contexts = std::uint64_t{vocab} * vocab;
  if (vocab < 1 || vocab > 65536)
    return status::error("markov_source: vocab must be in [1, 65536], got "
                         + std::to_string(vocab));
  if (table.size() != contexts)
    return status::error(
      "markov_source: table has " + std::to_string(table.size())
      + " rows, expected vocab^2 = " + std::to_string(contexts));
  markov_source m;
  m.vocab_ = vocab;
  m.row_begin_.resize(contexts + 1);
  for (std::uint64_t ctx = 0; ctx < contexts; ++ctx) {
    m.row_begin_[ctx] = m.successors_.size();
    if (table[ctx].empty())
      return status::error("markov_source: row " + std::to_string(ctx)
                           + " has no successors");
    double total = 0.0;
    for (const successor& s : table[ctx]) {
      if (s.token < 0 || std::uint32_t(s.token) >= vocab || !(s.prob > 0.0))
        return status::error(
          "markov_source: row " + std::to_string(ctx)
          + " has a successor outside the vocab or a non-positive probability");
      for (auto i = m.row_begin_[ctx]; i < m.successors_.size(); ++i)
        if (m.successors_[i].token == s.token)
          return status::error("markov_source: row " + std::to_string(ctx)
                               + " repeats token " + std::to_string(s.token));
      total += s.prob;
      m.successors_.push_back(s);
    }
    if (std::abs(total - 1.0) > 1e-9)
      return status::error("markov_source: row " + std::to_string(ctx)
                           + " sums to " + std::to_string(total) + ", not 1");
  }
  m.row_begin_[contexts] = m.successors_.size();
  TUTTI_RETURN_IF_ERROR(m.compute_entropy_rate());
  return m;
}

std::span<const successor> markov_source::successors(std::int32_t a,
                                                     std::int32_t b) const {
  const std::uint64_t ctx = std::uint64_t(a) * vocab_ + std::uint64_t(b);
  return {successors_.data() + row_begin_[ctx],
          successors_.data() + row_begin_[ctx + 1]};
}

double markov_source::prob(std::int32_t a, std::int32_t b,
                           std::int32_t c) const {
  for (const successor& s : successors(a, b))
    if (s.token == c)
      return s.prob;
  return 0.0;
}

// The entropy rate only has one value if every pair state can reach every
// other (one recurrent class): check with a forward and a backward search.
status markov_source::check_strongly_connected() const {
  const std::uint64_t states = row_begin_.size() - 1;
  // Reverse edges in compressed form: into[into_begin[t] ..] lists the
  // predecessors of state t.
  std::vector<std::uint64_t> into_begin(states + 1, 0);
  for (std::uint64_t ab = 0; ab < states; ++ab)
    for (auto i = row_begin_[ab]; i < row_begin_[ab + 1]; ++i)
      ++into_begin[(ab % vocab_) * vocab_ + successors_[i].token + 1];
  for (std::uint64_t t = 0; t < states; ++t)
    into_begin[t + 1] += into_begin[t];
  std::vector<std::uint64_t> into(successors_.size()),
    fill(into_begin.begin(), into_begin.end() - 1);
  for (std::uint64_t ab = 0; ab < states; ++ab)
    for (auto i = row_begin_[ab]; i < row_begin_[ab + 1]; ++i)
      into[fill[(ab % vocab_) * vocab_ + successors_[i].token]++] = ab;

  for (bool forward : {true, false}) {
    std::vector<char> seen(states, 0);
    std::vector<std::uint64_t> stack{0};
    seen[0] = 1;
    std::uint64_t reached = 1;
    while (!stack.empty()) {
      const std::uint64_t s = stack.back();
      stack.pop_back();
      auto visit = [&](std::uint64_t t) {
        if (!seen[t])
          seen[t] = 1, ++reached, stack.push_back(t);
      };
      if (forward)
        for (auto i = row_begin_[s]; i < row_begin_[s + 1]; ++i)
          visit((s % vocab_) * vocab_ + successors_[i].token);
      else
        for (auto i = into_begin[s]; i < into_begin[s + 1]; ++i)
          visit(into[i]);
    }
    if (reached != states)
      return status::error("markov_source: chain is not irreducible: "
                           + std::to_string(states - reached) + " of "
                           + std::to_string(states) + " pair states are "
                           + (forward ? "unreachable from" : "unable to reach")
                           + " state (0,0)");
  }
  return {};
}

// pi over pair states by power iteration of (a,b) -> (b,c) until no entry
// moves by more than 1e-15, then H = -sum_ab pi(ab) sum_c P(c|ab) log P(c|ab).
// The iteration uses the lazy chain 0.1 I + 0.9 P: same stationary
// distribution, but aperiodic, so it converges for every irreducible chain
// (a periodic one would oscillate forever under P itself). A small laziness
// barely slows the aperiodic chains that random() builds.
status markov_source::compute_entropy_rate() {
  if (auto err = check_strongly_connected(); !err)
    return err;
  const std::uint64_t states = row_begin_.size() - 1;
  constexpr double tolerance = 1e-15;
  constexpr int max_iterations = 100000;
  constexpr double laziness = 0.1;
  std::vector<double> pi(states, 1.0 / double(states)), next(states);
  double change = 1.0;
  int iteration = 0;
  for (; iteration < max_iterations && change > tolerance; ++iteration) {
    std::fill(next.begin(), next.end(), 0.0);
    for (std::uint64_t ab = 0; ab < states; ++ab) {
      const std::uint64_t b_row = (ab % vocab_) * vocab_;
      for (auto i = row_begin_[ab]; i < row_begin_[ab + 1]; ++i)
        next[b_row + successors_[i].token] += (1 - laziness) * pi[ab]
                                              * successors_[i].prob;
    }
    for (std::uint64_t s = 0; s < states; ++s)
      next[s] += laziness * pi[s];
    double total = 0.0;
    for (double x : next)
      total += x;
    change = 0.0;
    for (std::uint64_t s = 0; s < states; ++s) {
      next[s] /= total; // keeps rounding from drifting the mass away from 1
      change = std::max(change, std::abs(next[s] - pi[s]));
    }
    pi.swap(next);
  }
  if (change > tolerance)
    return status::error(
      "markov_source: stationary distribution did not converge after "
      + std::to_string(iteration) + " iterations (last change "
      + std::to_string(change) + ")");

  double h = 0.0;
  for (std::uint64_t ab = 0; ab < states; ++ab) {
    double row = 0.0;
    for (auto i = row_begin_[ab]; i < row_begin_[ab + 1]; ++i)
      row -= successors_[i].prob * std::log(successors_[i].prob);
    h += pi[ab] * row;
  }
  entropy_rate_ = h;
  return {};
}

std::vector<std::int32_t> markov_source::generate(std::uint64_t n,
                                                  std::uint64_t seed) const {
  std::mt19937_64 rng(detail::derive_seed(seed, {0x67656e6572617465ULL}));
  std::vector<std::int32_t> out;
  out.reserve(n);
  std::int32_t a = static_cast<std::int32_t>(
    detail::uniform_below(rng, vocab_));
  std::int32_t b = static_cast<std::int32_t>(
    detail::uniform_below(rng, vocab_));
  if (n > 0)
    out.push_back(a);
  if (n > 1)
    out.push_back(b);
  while (out.size() < n) {
    const auto next = successors(a, b);
    double u = detail::uniform_open01(rng);
    std::int32_t c =
      next.back().token; // if rounding leaves u above the last cumulative sum
    for (const successor& s : next) {
      if (u < s.prob) {
        c = s.token;
        break;
      }
      u -= s.prob;
    }
    out.push_back(c);
    a = b;
    b = c;
  }
  return out;
}

} // namespace tutti::data
