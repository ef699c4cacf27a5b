// OpenBLAS kernel selection at start-up (blas_core.hpp says why).

#include "tutti/kernels/blas_core.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

namespace tutti::kernels {

namespace {

// OpenBLAS's x86 fallbacks, older than any core preferred_blas_core() names.
bool is_fallback_core(const std::string& core) {
  for (const char* old :
       {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge",
        "Katmai", "Coppermine", "Northwood", "Banias", "Atom"})
    if (core == old)
      return true;
  return false;
}

// This process's arguments, read back from the kernel: the initialiser runs
// before main() and has no argv of its own.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string current;
  for (char c : raw) {
    if (c == '\0') {
      args.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  return args;
}

} // namespace

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string preferred_blas_core() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16"))
    return "Cooperlake";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
      && __builtin_cpu_supports("avx512bw")
      && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return {};
}

void select_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr)
    return;
  const std::string preferred = preferred_blas_core();
  if (preferred.empty() || !is_fallback_core(blas_core_name()))
    return;
  std::vector<std::string> args = own_arguments();
  if (args.empty())
    return;
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  // Set even if the exec fails, so no later check tries again.
  ::setenv("OPENBLAS_CORETYPE", preferred.c_str(), 1);
  ::execv("/proc/self/exe", argv.data());
  // Not reached unless the exec failed: run on with the fallback kernels.
}

} // namespace tutti::kernels
