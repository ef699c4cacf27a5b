#!/usr/bin/env bash
# launch-local.sh N CONFIG: N node daemons of CONFIG on this machine
# (loopback). Waits for all of them; Ctrl-C stops the job at a step
# boundary. CONFIG must say nnodes: N.
set -euo pipefail
n=${1:?usage: launch-local.sh N CONFIG}
config=${2:?usage: launch-local.sh N CONFIG}
cd "$(dirname "$0")/.."
bin=./build/apps/tuttid
[ -x "$bin" ] || { echo "launch-local: build first (./deploy/build.sh)" >&2; exit 2; }
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' INT TERM
for ((rank = n - 1; rank >= 0; rank--)); do
  "$bin" --config "$config" --node-rank "$rank" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done
exit "$status"
