#pragma once
// Random numbers that are identical on every platform and standard library.
// std::mt19937_64's output sequence is fixed by the standard, but the
// distributions (uniform_real_distribution, discrete_distribution, ...) are
// implementation-defined, so we convert the raw 64-bit words ourselves.

#include <cstdint>
#include <initializer_list>
#include <random>

namespace tutti::data::detail {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Independent-looking seed for a sub-stream, e.g. derive_seed(seed, {rank, epoch}).
inline std::uint64_t derive_seed(std::uint64_t seed,
                                 std::initializer_list<std::uint64_t> parts) {
  std::uint64_t h = splitmix64(seed);
  for (std::uint64_t p : parts)
    h = splitmix64(h ^ p);
  return h;
}

// Uniform in the open interval (0, 1): safe to take log() of.
inline double uniform_open01(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}

// Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method).
inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(rng()) * n;
  auto low = static_cast<std::uint64_t>(m);
  if (low < n) {
    std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(rng()) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

} // namespace tutti::data::detail
