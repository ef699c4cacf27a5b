#!/usr/bin/env bash
# Runs HERE (a build machine with the Debian packages and the CUDA toolkit):
# builds the GPU programs and packs what bench/gpu_check.sh needs on a bare
# GPU machine (CUDA driver + toolkit libraries + PyTorch, no Debian
# packages, no registry) into BUILD/gpu-carry/{bin,lib}, and the same as
# BUILD/gpu-carry.tar.gz (smaller: carry that one when size matters).
#
#   bin/  the programs, debug info stripped
#   lib/  every shared library they load that the GPU machine lacks
#         (OpenBLAS, gfortran, gloo, ...), found with ldd
#
# Not carried, on purpose: glibc and libstdc++/libgcc_s (the GPU machine has
# its own, newer ones; an older copy first on LD_LIBRARY_PATH breaks its
# programs), and the CUDA libraries (libcublas*, libnccl, libcuda): they
# must match that machine's driver, and cuBLASLt alone is ~500 MB.
# gpu_check.sh finds them there (/usr/local/cuda, PyTorch's nvidia-* wheels).
#
# Usage: bench/collect_gpu_carry.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja
nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' \
  "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)
[ -n "$nvcc" ] && ! grep -q '^TUTTI_DISABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" \
  || { echo "collect_gpu_carry: $build has no CUDA backend (no nvcc?)" >&2; exit 1; }

programs=(tests/test_cuda_kernels tests/test_nccl_communicator bench/gpu_bench
  apps/tutti)
targets=()
for p in "${programs[@]}"; do targets+=("$(basename "$p")"); done
cmake --build "$build" -j1 --target "${targets[@]}"

out="$build/gpu-carry"
rm -rf "$out" "$build/gpu-carry.tar.gz"
mkdir -p "$out/bin" "$out/lib"
for p in "${programs[@]}"; do
  cp "$build/$p" "$out/bin/"
  strip --strip-debug "$out/bin/$(basename "$p")"
done

skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcublasLt|libcudart|libnccl|libnvidia)'
missing=0
for p in "$out"/bin/*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "collect_gpu_carry: $(basename "$p") needs $name, not found here" >&2
      missing=1
      continue
    fi
    [[ "$name" =~ $skip ]] && continue
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$p")
done
[ "$missing" = 0 ] || exit 1

cat > "$out/MANIFEST" <<EOF
built $(date -u +%FT%TZ) on $(uname -n) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')
nvcc: $("$nvcc" --version | tail -1)
bin: $(cd "$out/bin" && ls | tr '\n' ' ')
lib: $(cd "$out/lib" && ls | tr '\n' ' ')
EOF
tar -czf "$build/gpu-carry.tar.gz" -C "$build" gpu-carry
cat "$out/MANIFEST"
du -sh "$out" "$build/gpu-carry.tar.gz"
