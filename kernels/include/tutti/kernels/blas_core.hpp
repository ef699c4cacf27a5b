#pragma once
// Which OpenBLAS kernels this process runs.
//
// Debian 12's OpenBLAS (0.3.21) does not recognise CPUs newer than its
// release (Emerald Rapids, for one) and falls back to its generic
// "Prescott" SSE3 kernels: sgemm at a fifth to a tenth of what the CPU can
// do. OpenBLAS picks its kernels once, when the library is loaded, from
// OPENBLAS_CORETYPE or its own CPU detection, so the only way to correct
// the choice is that variable at process start. The CPU backend therefore
// checks at start-up (a static initialiser in cpu_linear.cpp): when OpenBLAS
// fell back to a core older than the CPU's instruction set supports and
// OPENBLAS_CORETYPE is not set, the program re-executes itself with it set.
// Every process that links the kernels makes the same choice, so processes
// that must agree to the bit (a daemon and `tutti run`, a test and the
// program it runs) use the same kernels. A set OPENBLAS_CORETYPE is always
// respected: OPENBLAS_CORETYPE=Prescott reproduces the old behaviour.

#include <string>

namespace tutti::kernels {

// The kernels OpenBLAS runs in this process ("Cooperlake", "Haswell", ...).
std::string blas_core_name();

// The OpenBLAS core this CPU's instruction set supports best among those
// Debian's build carries ("Cooperlake", "SkylakeX", "Haswell"), or empty when
// none of them applies.
std::string preferred_blas_core();

// Re-executes this program with OPENBLAS_CORETYPE set to
// preferred_blas_core() when OpenBLAS chose an older core and the variable is
// unset; returns (changing nothing) otherwise, or when the re-exec fails.
void select_blas_core();

} // namespace tutti::kernels
