// staged_collectives sums every element in member order whatever order the
// transport adds in: over a communicator that adds in a ring order of its
// own, as NCCL's all-reduce does, all_reduce_sum still gives the bits of the
// in-memory (and Gloo) all-reduce and of the distributed optimizer's
// reduce-scatter. NCCL needs a GPU, so its order is played by a test double
// over the in-memory group: it reports sums_in_member_order() false, as the
// NCCL communicator does, and adds each chunk ring-wise, starting one
// member after the chunk's owner (a ring reduce-scatter's order).

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tutti/comm/slices.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/moe/staged_collectives.hpp"

#include "memory_group.hpp"

using namespace tutti;
using tutti::testing::on_memory_group;

namespace {

constexpr int kMembers = 4;
constexpr size_t kCount = 1003; // uneven slices

class ring_order_communicator final : public comm::communicator {
public:
  explicit ring_order_communicator(comm::communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

  status all_reduce_sum(float* data, size_t count) override {
    const int n = size();
    std::vector<float> all(count * n);
    std::vector<int64_t> send(n, int64_t(count)), recv(n, int64_t(count));
    std::vector<float> copies(count * n);
    for (int p = 0; p < n; ++p)
      std::memcpy(copies.data() + p * count, data, count * sizeof(float));
    TUTTI_RETURN_IF_ERROR(inner_.all_to_all_v(copies.data(), send, all.data(),
                                              recv, sizeof(float)));
    for (int owner = 0; owner < n; ++owner) {
      const auto chunk = comm::member_slice(int64_t(count), n, owner);
      for (int64_t e = chunk.first; e < chunk.first + chunk.count; ++e) {
        float sum = all[((owner + 1) % n) * count + e];
        for (int step = 2; step <= n; ++step)
          sum += all[((owner + step) % n) * count + e];
        data[e] = sum;
      }
    }
    return {};
  }
  status all_reduce_sum(double* data, size_t count) override {
    return inner_.all_reduce_sum(data, count);
  }
  status all_reduce_sum(int64_t* data, size_t count) override {
    return inner_.all_reduce_sum(data, count);
  }
  status all_to_all_v(const void* send, const std::vector<int64_t>& sc,
                      void* recv, const std::vector<int64_t>& rc,
                      size_t element_bytes) override {
    return inner_.all_to_all_v(send, sc, recv, rc, element_bytes);
  }
  status all_to_all(const int64_t* send, int64_t* recv,
                    size_t per_member) override {
    return inner_.all_to_all(send, recv, per_member);
  }
  status barrier() override { return inner_.barrier(); }
  status abort() override { return inner_.abort(); }
  bool sums_in_member_order() const override { return false; }
  std::string describe() const override {
    return "ring-order " + inner_.describe();
  }

private:
  comm::communicator& inner_;
};

// Member p's values: magnitudes from 1e-3 to 1e4, so the order of the
// additions shows in the bits.
std::vector<float> values_of(int member) {
  std::mt19937_64 rng(100 + member);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(kCount);
  for (size_t i = 0; i < kCount; ++i)
    v[i] = d(rng) * (i % 3 == 0 ? 1e4f : i % 3 == 1 ? 1.0f : 1e-3f);
  return v;
}

std::vector<float> member_order_sum() {
  std::vector<float> sum = values_of(0);
  for (int p = 1; p < kMembers; ++p) {
    const auto v = values_of(p);
    for (size_t i = 0; i < kCount; ++i)
      sum[i] += v[i];
  }
  return sum;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

TEST_CASE("all_reduce_sum is in member order over a transport that adds in "
          "ring order",
          "[unit]") {
  const auto expected = member_order_sum();
  on_memory_group("ring_order", kMembers,
                  [&](int r, comm::communicator& c) -> std::string {
    ring_order_communicator ring(c);
    moe::staged_collectives staged(kernels::cpu_stream());
    // The double itself: the ring's bits, not member order's (else this
    // test would show nothing).
    auto direct = values_of(r);
    if (!ring.all_reduce_sum(direct.data(), kCount).ok())
      return "the ring all-reduce failed";
    if (same_bits(direct, expected))
      return "the ring order gave member order's bits: inputs too tame";
    // Through staged_collectives, over the ring and over the group itself.
    auto over_ring = values_of(r);
    if (auto st = staged.all_reduce_sum(ring, over_ring.data(), kCount); !st)
      return st.message();
    if (!same_bits(over_ring, expected))
      return "over the ring-order transport: not member order's bits";
    auto in_memory = values_of(r);
    if (auto st = staged.all_reduce_sum(c, in_memory.data(), kCount); !st)
      return st.message();
    if (!same_bits(in_memory, expected))
      return "over the in-memory group: not member order's bits";
    // The distributed optimizer's slice: the same bits again.
    auto sharded = values_of(r);
    if (auto st = staged.reduce_scatter_sum(ring, sharded.data(), kCount); !st)
      return st.message();
    const auto mine = comm::member_slice(int64_t(kCount), kMembers, r);
    if (std::memcmp(sharded.data() + mine.first, expected.data() + mine.first,
                    mine.count * sizeof(float))
        != 0)
      return "the reduce-scatter slice differs from the all-reduce";
    return "";
  });
}
