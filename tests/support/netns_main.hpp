#pragma once
// The main of a test program that builds its own network with network
// namespaces (root, iproute2): where it cannot, it exits 77, which CTest
// reports as skipped (SKIP_RETURN_CODE), printing why.

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

namespace tutti::testing {

// Runs the Catch session, or skips when `why_not` (why namespaces are
// unavailable here) is not empty.
inline int netns_test_main(int argc, char** argv, const std::string& why_not) {
  if (!why_not.empty()) {
    std::printf("SKIPPED: network namespaces unavailable: %s\n",
                why_not.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}

} // namespace tutti::testing
