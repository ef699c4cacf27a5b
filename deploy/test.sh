#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
./deploy/build.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
