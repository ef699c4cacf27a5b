#include "tutti/store/checksum.hpp"

#include <xxhash.h>

namespace tutti::store {

std::uint64_t xxh64(const void* data, std::size_t size, std::uint64_t seed) {
  return XXH64(data, size, seed);
}

} // namespace tutti::store
