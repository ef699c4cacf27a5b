// The op router (kernels/src/route.cpp) and the CUDA error path, on any
// machine: cpu streams reach the CPU backend; a cuda stream either runs on
// the device, or fails loudly and clearly: std::logic_error in a build
// without the CUDA backend, tutti::kernels::device_error naming the failed
// call and its file:line in a CUDA build on a machine without a GPU.

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"

namespace k = tutti::kernels;

TEST_CASE("cpu streams reach the CPU backend", "[kernels][route]") {
  const std::vector<float> x = {1, 2, 3};
  CHECK(k::sum_squares(k::cpu_stream(), x.data(), 3) == 14.0);
  std::vector<double> y = {1, 1};
  const std::vector<double> a = {2, 3};
  k::axpy(k::cpu_stream(), 0.5, a.data(), y.data(), 2);
  CHECK(y == std::vector<double>{2.0, 2.5});
}

TEST_CASE("a cuda stream without a usable GPU fails clearly",
          "[kernels][route]") {
  const auto device = k::cuda_device_available();
  if (device) {
    WARN("a GPU answers here; the no-device path is not exercised");
    return;
  }
  INFO("no device: " << device.message());
  CHECK(!device.message().empty());
  float dummy = 0;
  const k::stream s = k::cuda_stream(nullptr);
#ifdef TUTTI_WITH_CUDA
  // The backend is built: the first CUDA call fails and says where.
  try {
    k::fill_zero(s, &dummy, 1);
    FAIL("fill_zero on a cuda stream without a device did not throw");
  } catch (const k::device_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("CUDA error") != std::string::npos);
    CHECK(what.find(".cu:") != std::string::npos); // file:line of the call
  }
  CHECK_THROWS_AS(k::device_buffer(64), k::device_error);
  CHECK_THROWS_AS(k::linear_forward(s, &dummy, &dummy, &dummy, 1, 1, 1),
                  k::device_error);
#else
  CHECK_THROWS_AS(k::fill_zero(s, &dummy, 1), std::logic_error);
  CHECK_THROWS_AS(k::device_buffer(64), std::logic_error);
#endif
}

TEST_CASE("an unknown device kind is rejected", "[kernels][route]") {
  k::stream s;
  s.device = static_cast<k::device_kind>(42);
  float dummy = 0;
  CHECK_THROWS_AS(k::fill_zero(s, &dummy, 1), std::invalid_argument);
}
