#!/usr/bin/env bash
# Runs HERE (the build machine: Debian packages and the CUDA toolkit): builds
# the GPU programs and packs, for each run of bench/GPU_PLAN.md, what that
# run's steps need on a bare GPU machine (driver, CUDA libraries, PyTorch; no
# Debian packages, no registry) into one compressed archive:
#
#   BUILD/gpu-run1/carry.tar.xz   gpu_probe, test_cuda_kernels,
#                                 test_nccl_communicator, test_nccl_ranks
#   BUILD/gpu-run2/carry.tar.xz   gpu_probe, tutti, gpu_bench
#
# Each archive unpacks to gpu-carry/{bin,lib,MANIFEST}: the programs
# stripped, and every shared library they load that the GPU machine lacks
# (OpenBLAS, gfortran, gloo, RocksDB, ...), found with ldd. Not carried, on
# purpose: glibc and libstdc++/libgcc_s (the GPU machine has its own, newer
# ones; an older copy first on LD_LIBRARY_PATH breaks its programs), and the
# CUDA libraries (libcuda, cuBLAS, cuBLASLt, NCCL): they must match that
# machine's driver, and cuBLASLt alone is ~500 MB. gpu_check.sh finds them
# there, one library at a time.
#
# A run's command carries its folder (`carry: ["build/gpu-run1"]`) beside
# the working tree; the two together must stay under the device tool's
# 64 MiB. This script prints each archive's size and the tree's, and calls a
# run ready only below that limit (exit 1 otherwise).
#
# Usage: bench/collect_gpu_carry.sh [--no-build] [--out DIR] [--xz N] [BUILD_DIR]
#   BUILD_DIR   the build tree (default: build); the carries go to
#               BUILD_DIR/gpu-run1 and gpu-run2, or to DIR/ with --out
#   --no-build  pack the programs as built (tests/cli/test_gpu_check.py)
#   --xz N      xz's level (default 6; the test packs at 0, a bound above 6)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build out="" do_build=1 level=6
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) do_build=0; shift ;;
    --out) out=${2:?--out takes a folder}; shift 2 ;;
    --xz) level=${2:?--xz takes a level}; shift 2 ;;
    -*) echo "collect_gpu_carry: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
out=${out:-$build}
limit_mib=64
[ -f "$build/CMakeCache.txt" ] || [ "$do_build" = 0 ] || cmake -S . -B "$build" -G Ninja
[ -f "$build/CMakeCache.txt" ] \
  || { echo "collect_gpu_carry: $build is not a build tree" >&2; exit 1; }
nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' \
  "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)
[ -n "$nvcc" ] && ! grep -q '^TUTTI_DISABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" \
  || { echo "collect_gpu_carry: $build has no CUDA backend (no nvcc?)" >&2; exit 1; }

# Which programs each run needs (paths in the build tree).
run1=(bench/gpu_probe tests/test_cuda_kernels tests/test_nccl_communicator
  tests/test_nccl_ranks)
run2=(bench/gpu_probe apps/tutti bench/gpu_bench)
targets=()
for p in "${run1[@]}" "${run2[@]}"; do targets+=("$(basename "$p")"); done
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
[ "$do_build" = 0 ] || cmake --build "$build" -j2 --target "${targets[@]}"
for p in "${run1[@]}" "${run2[@]}"; do
  [ -x "$build/$p" ] || { echo "collect_gpu_carry: $build/$p is not built" >&2; exit 1; }
done

# What the carried programs were built against, for gpu_probe's verdict and
# for whoever reads the log.
cuda_h=$(dirname "$nvcc")/../include
runtime=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\)/\1/p' "$cuda_h/cuda_runtime_api.h" | head -1)
cublas_major=$(sed -n 's/^#define CUBLAS_VER_MAJOR *\([0-9]*\)/\1/p' "$cuda_h/cublas_api.h" | head -1)
nccl_h=$(sed -n 's/^TUTTI_NCCL_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")
nccl_major=$( [ -f "$nccl_h/nccl.h" ] && sed -n 's/^#define NCCL_MAJOR *\([0-9]*\)/\1/p' "$nccl_h/nccl.h" | head -1)

# Never carried (see the top of this file).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcublasLt|libcudart|libnccl|libnvidia)'

tree_bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) \
  | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
pack() { # pack NAME PROGRAM...
  local name=$1 dir="$out/$1"
  shift
  local staged="$dir/gpu-carry"
  rm -rf "$dir" && mkdir -p "$staged/bin" "$staged/lib"
  for p in "$@"; do
    cp "$build/$p" "$staged/bin/"
    strip --strip-unneeded "$staged/bin/$(basename "$p")"
  done
  local missing=0 name_ arrow path rest
  for p in "$staged"/bin/*; do
    while read -r name_ arrow path rest; do
      [ "$arrow" = "=>" ] || continue
      if [ "$path" = "not" ]; then
        echo "collect_gpu_carry: $(basename "$p") needs $name_, not found here" >&2
        missing=1
        continue
      fi
      [[ "$name_" =~ $skip ]] && continue
      if [ ! -e "$staged/lib/$name_" ]; then
        cp -L "$path" "$staged/lib/$name_"
        chmod u+w "$staged/lib/$name_"
        strip --strip-unneeded "$staged/lib/$name_" 2>/dev/null || true
      fi
    done < <(ldd "$p")
  done
  [ "$missing" = 0 ] || exit 1
  cat > "$staged/MANIFEST" <<EOF
run: $name
built $(date -u +%FT%TZ) on $(uname -n) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')
nvcc: $("$nvcc" --version | tail -1)
cuda_runtime: $runtime (static)
cublas_major: $cublas_major
nccl_major: ${nccl_major:-none}
bin: $(cd "$staged/bin" && ls | tr '\n' ' ')
lib: $(cd "$staged/lib" && ls | tr '\n' ' ')
EOF
  tar -C "$dir" -cf - gpu-carry | xz "-$level" -T2 > "$dir/carry.tar.xz"
  rm -rf "$staged"
  local bytes total
  bytes=$(stat -c %s "$dir/carry.tar.xz")
  total=$((bytes + tree_bytes))
  awk -v n="$name" -v f="$dir/carry.tar.xz" -v a="$bytes" -v t="$tree_bytes" \
    -v l="$limit_mib" 'BEGIN { m = 1048576; printf "%s: %s %.1f MiB + working tree %.1f MiB = %.1f MiB of %d MiB: ", n, f, a / m, t / m, (a + t) / m, l }'
  if [ "$total" -ge $((limit_mib * 1048576)) ]; then
    echo "OVER THE LIMIT, not ready"
    return 1
  fi
  echo "ready (carry: [\"$dir\"])"
}
status=0
pack gpu-run1 "${run1[@]}" || status=1
pack gpu-run2 "${run2[@]}" || status=1
exit $status
