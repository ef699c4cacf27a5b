#pragma once
// xxh64: the one hash used on disk (checkpoint tensors, manifests, shards).

#include <cstddef>
#include <cstdint>

namespace tutti::store {

std::uint64_t xxh64(const void* data, std::size_t size, std::uint64_t seed = 0);

} // namespace tutti::store
