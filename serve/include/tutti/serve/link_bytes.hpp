#pragma once
// All-to-all bytes a serving replica's ranks sent, by the link they
// crossed: to themselves (copies), to another rank of their rack, to
// another rack (serve.racks; without it every rank is in one rack).

#include <array>
#include <cstdint>

namespace tutti::serve {

enum class link_class : int { self = 0, intra_rack = 1, inter_rack = 2 };
constexpr int link_classes = 3;
using link_bytes = std::array<int64_t, link_classes>;

// The `link` label of tutti_serve_alltoall_bytes_total.
inline const char* link_name(link_class l) {
  switch (l) {
  case link_class::self:
    return "self";
  case link_class::intra_rack:
    return "intra_rack";
  case link_class::inter_rack:
    return "inter_rack";
  }
  return "?";
}

} // namespace tutti::serve
