#!/usr/bin/env bash
# Configures and builds tutti into ./build (CMake + Ninja, RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${TUTTI_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
