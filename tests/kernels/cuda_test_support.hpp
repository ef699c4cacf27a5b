#pragma once
// Harness for test_cuda_kernels: one test body runs on either backend.
//
// A `backend` hands the body its inputs (copied; uploaded on CUDA) and
// output buffers poisoned with NaN (floats) or 0x5a5a5a5a (integers), so an
// element the op forgets to write shows up as a mismatch. The body returns
// named outputs; check_backends() runs it on the CPU (the reference) and
// twice on the GPU, and compares: floats by normwise relative error (as in
// test_kernels_precision), integers exactly, and the two GPU runs bitwise.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/kernels/tensor.hpp"

#include "kernel_inputs.hpp"

namespace tutti::testing {

namespace k = tutti::kernels;
using Vec = std::vector<double>;

struct output {
  std::string name;
  Vec values;
  bool exact; // integers: must match exactly
};
using outputs = std::vector<output>;

class backend {
public:
  explicit backend(k::stream s) : s(s) {}

  // A copy of `host` where the op can read (and modify) it.
  template <class T>
  T* in(const std::vector<T>& host) {
    auto h = std::make_unique<holder<T>>();
    h->values.upload(s, host);
    T* p = h->values.data();
    keep_.push_back(std::move(h));
    return p;
  }

  // `n` poisoned elements for the op to overwrite.
  template <class T>
  T* out(size_t n) {
    return in(std::vector<T>(n, poison<T>()));
  }

  template <class T>
  output f(const char* name, const T* p, size_t n) {
    return {name, widen(get(p, n)), false};
  }
  template <class T>
  output i(const char* name, const T* p, size_t n) {
    return {name, widen(get(p, n)), true};
  }

  k::stream s;

private:
  struct any_holder {
    virtual ~any_holder() = default;
  };
  template <class T>
  struct holder : any_holder {
    k::tensor<T> values; // host or device memory, by the stream
  };

  template <class T>
  static T poison() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::quiet_NaN();
    else
      return static_cast<T>(0x5a5a5a5a);
  }

  template <class T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> h(n);
    k::download(s, h.data(), p, sizeof(T) * n);
    return h;
  }

  template <class T>
  static Vec widen(const std::vector<T>& v) {
    return Vec(v.begin(), v.end());
  }

  std::vector<std::unique_ptr<any_holder>> keep_;
};

// ||a - ref|| / ||ref|| (absolute norm when ref is all zeros); NaN anywhere
// in `a` gives NaN, which fails every comparison.
// Runs body(backend&, T{}) on the CPU and twice on `gpu`; see the top.
template <class T, class Body>
void check_backends(const char* op, const k::stream& gpu, double tol,
                    Body body) {
  backend cpu_be(k::cpu_stream()), gpu_be(gpu), again_be(gpu);
  const outputs ref = body(cpu_be, T{});
  const outputs got = body(gpu_be, T{});
  const outputs again = body(again_be, T{});
  REQUIRE(ref.size() == got.size());
  for (size_t o = 0; o < ref.size(); ++o) {
    INFO(op << " (" << (sizeof(T) == 4 ? "fp32" : "fp64") << ") output "
            << ref[o].name);
    REQUIRE(ref[o].values.size() == got[o].values.size());
    if (ref[o].exact) {
      CHECK(got[o].values == ref[o].values);
    } else {
      const double err = rel_err(got[o].values, ref[o].values);
      INFO("relative error " << err << " (tolerance " << tol << ")");
      CHECK(err <= tol);
    }
    // Same GPU, same inputs: the same bits (no atomics, fixed orders).
    CHECK(std::memcmp(got[o].values.data(), again[o].values.data(),
                      sizeof(double) * got[o].values.size())
          == 0);
  }
}

} // namespace tutti::testing
