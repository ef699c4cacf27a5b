#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite through CTest.
# Tests that need what this machine lacks (a GPU, network namespaces) exit
# 77 and CTest reports them as skipped, never passed; their reasons are
# printed at the end. Two tests at a time (TUTTI_TEST_JOBS): the multi-
# daemon tests wait on sockets and processes more than they compute, and
# every wait has its own deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
./deploy/build.sh
cd build
status=0
ctest --output-on-failure --timeout 900 -j "${TUTTI_TEST_JOBS:-2}" "$@" || status=$?
skipped=$(grep "^SKIPPED" Testing/Temporary/LastTest.log 2>/dev/null || true)
if [ -n "$skipped" ]; then
  echo
  echo "Skipped, and why:"
  echo "$skipped" | sed 's/^/  /'
fi
exit "$status"
