#!/usr/bin/env bash
# Builds the benchmarks and runs them one after another (never in parallel:
# they would measure each other). Each prints a markdown table of figures
# next to anchors measured in the same run; see bench/RESULTS.md.
# Usage: bench/run_all.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja
cmake --build "$build" -j1 --target bench_expert_ffn bench_dispatch bench_step bench_serve
build=$(cd "$build" && pwd)

echo "# $(date -u +%F) on $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
for b in bench_expert_ffn bench_dispatch bench_step bench_serve; do
  echo
  echo "## $b"
  start=$SECONDS
  TUTTI_BINARY_DIR="$build" TUTTI_SOURCE_DIR="$PWD" "$build/bench/$b"
  echo "($b took $((SECONDS - start)) s)"
done
