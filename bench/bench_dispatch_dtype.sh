#!/usr/bin/env bash
# The 8-bit dispatch's effect on training (moe_config.dispatch_dtype): one
# job config run once per dtype (fp32, then the 8-bit ones), the same data,
# seed and steps; prints per dtype the last logged loss, the held-out loss
# of the last evaluation, its relative difference from fp32's, the step's
# all-to-all bytes per rank (metrics.jsonl) against `tutti plan`'s, and the
# wall time. Defaults: configs/text.yaml (1,000 steps of real text) on the
# data its header prepares.
#
#   bench/bench_dispatch_dtype.sh DATA_DIR [CONFIG] [BUILD_DIR]
#   env: OUT (default /tmp/bench_dispatch_dtype), DTYPES ("fp32 int8 fp8")
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
data=$(cd "${1:?usage: bench_dispatch_dtype.sh DATA_DIR [CONFIG] [BUILD_DIR]}" && pwd)
config=${2:-$here/configs/text.yaml}
build=$(cd "${3:-$here/build}" && pwd)
tutti=$build/apps/tutti
out=${OUT:-/tmp/bench_dispatch_dtype}
dtypes=${DTYPES:-fp32 int8 fp8}
mkdir -p "$out"

echo "# $(date -u +%F\ %H:%M) UTC, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %10s %10s %10s %14s %14s %8s\n' dtype loss eval_loss vs_fp32 \
  a2a_bytes plan_bytes wall_s
base=""
for dtype in $dtypes; do
  run=$out/$dtype
  rm -rf "$run"
  sed -e "s|^  dir: runs/[a-z-]*/data$|  dir: $data|" \
      -e "s|^  dir: runs/[a-z-]*$|  dir: $run|" \
      -e "s|^moe_config:$|moe_config:\n  dispatch_dtype: $dtype|" \
      "$config" > "$out/$dtype.yaml"
  start=$(date +%s.%N)
  "$tutti" run "$out/$dtype.yaml" --quiet > "$out/$dtype.log" 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  plan=$("$tutti" plan "$out/$dtype.yaml" --json \
         | python3 -c 'import json,sys; print(json.load(sys.stdin)["alltoall_bytes"])')
  python3 - "$run/metrics.jsonl" "$dtype" "$plan" "$wall" "$base" <<'PY'
import json, sys
path, dtype, plan, wall, base = sys.argv[1:]
lines = [json.loads(l) for l in open(path)]
loss = [l["loss"] for l in lines if "loss" in l][-1]
evals = [l["eval_loss"] for l in lines if "eval_loss" in l]
a2a = [l["alltoall_bytes"] for l in lines if "alltoall_bytes" in l][-1]
rel = "-" if not base else "%+.4f%%" % (100 * (evals[-1] - float(base)) / float(base))
print("%-6s %10.4f %10.4f %10s %14d %14d %8.0f" % (dtype, loss, evals[-1], rel, a2a, int(plan), float(wall)))
PY
  if [ -z "$base" ]; then
    base=$(python3 -c "import json; e=[json.loads(l) for l in open('$run/metrics.jsonl')]; print([l['eval_loss'] for l in e if 'eval_loss' in l][-1])")
  fi
done
