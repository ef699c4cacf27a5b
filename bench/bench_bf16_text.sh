#!/usr/bin/env bash
# bf16 GEMMs against float32 on real text: configs/text.yaml (a small
# Mixtral-style MoE on 2 ranks, the Python documentation's sources,
# 1,000 steps) trained twice from the same data and seed, once as written
# and once with train.gemm_precision: bf16. Prints the held-out loss of
# both at every evaluation, the relative difference of the last, and each
# run's median step time, with what oneDNN ran the bf16 GEMMs on.
#
# Needs Debian's python3-doc (the text).
# Usage: bench/bench_bf16_text.sh [BUILD_DIR]   (STEPS=1000 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
steps=${STEPS:-1000}
tutti=$build/apps/tutti
docs=/usr/share/doc/python3.11/html/_sources
[ -x "$tutti" ] || { echo "bench_bf16_text: $tutti not built" >&2; exit 1; }
[ -d "$docs" ] || { echo "bench_bf16_text: $docs missing (python3-doc)" >&2; exit 1; }
scratch=$(mktemp -d /tmp/bench_bf16_text.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

"$tutti" data tokenizer train --input "$docs" --vocab 4096 --out "$scratch/tok" >/dev/null
"$tutti" data prepare --input "$docs" --tokenizer "$scratch/tok" \
  --out "$scratch/data" >/dev/null
for precision in fp32 bf16; do
  sed -e "s|^  dir: runs/text/data$|  dir: $scratch/data|" \
      -e "s|^  dir: runs/text$|  dir: $scratch/$precision|" \
      -e "s|^  steps: 1000$|  steps: $steps|" \
      -e "s|^  seed: \(.*\)$|  seed: \1\n  gemm_precision: $precision|" \
      configs/text.yaml >"$scratch/$precision.yaml"
  grep -q "gemm_precision: $precision" "$scratch/$precision.yaml" \
    || { echo "bench_bf16_text: configs/text.yaml has no train.seed line" >&2; exit 1; }
  "$tutti" run "$scratch/$precision.yaml" --quiet >"$scratch/$precision.log" 2>&1
done

echo "bench_bf16_text $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
grep -ho "bf16 GEMMs on oneDNN [a-z0-9_]*\|this CPU has no bf16 units[^\"]*" \
  "$scratch/bf16/tutti.log.jsonl" "$scratch/bf16.log" 2>/dev/null | head -1 || true
python3 - "$scratch/fp32/metrics.jsonl" "$scratch/bf16/metrics.jsonl" <<'PY'
import json, statistics, sys
def series(path):
    rows = [json.loads(line) for line in open(path)]
    evals = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
    times = [r["step_time_s"] for r in rows if "step_time_s" in r and r["step"] > 3]
    return evals, statistics.median(times)
(fp32, t32), (bf16, t16) = series(sys.argv[1]), series(sys.argv[2])
print("| step | held-out loss fp32 | held-out loss bf16 | difference |")
print("|---:|---:|---:|---:|")
for step in sorted(fp32):
    a, b = fp32[step], bf16.get(step, float("nan"))
    print(f"| {step} | {a:.4f} | {b:.4f} | {100 * (b - a) / a:+.2f}% |")
print(f"median step time: fp32 {1000 * t32:.1f} ms, bf16 {1000 * t16:.1f} ms "
      f"({t32 / t16:.2f}x)")
PY
