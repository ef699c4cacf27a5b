#!/usr/bin/env bash
# The pipeline-bubble benchmark: one small MoE trained on PP2 (two
# ranks in one process, one stage each) with M micro-batches for each M in
# MICRO, and per run the measured bubble of stage 0 against the 1F1B
# formula (p-1)/(m+p-1).
#
# Measured bubble: the median over steps (after the first 2) of stage 0's
# time_pipeline_s (waiting for and exchanging with stage 1, from the
# rank's step timers, metrics.jsonl) over step_time_s. The step also holds
# the gradient all-reduces and the optimizer, which the formula leaves out,
# so the measured figure sits a little below it when stage 0 waits for
# nothing else.
#
#   bench/bench_pipeline.sh [BUILD_DIR]
#   env: OUT (default /tmp/bench_pipeline), STEPS (12), MICRO ("1 2 4 8")
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
tutti=$build/apps/tutti
out=${OUT:-/tmp/bench_pipeline}
steps=${STEPS:-12}
micro=${MICRO:-"1 2 4 8"}
rm -rf "$out" && mkdir -p "$out"
"$tutti" data synth --out "$out/data" --vocab 256 --seed 5 --tokens 400000 >/dev/null

config() { # NAME MICRO_BATCHES
  cat <<YAML
cluster_config:
  world_size: 2
  nnodes: 1
  nproc_per_node: 2
  ep_size: 1
  pipeline_model_parallel_size: 2
  collective_timeout_ms: 60000
model:
  vocab_size: 256
  hidden_size: 128
  intermediate_size: 256
  num_hidden_layers: 4
  num_attention_heads: 4
  num_key_value_heads: 2
  max_seq_len: 64
moe_config:
  num_experts: 4
  router_top_k: 2
  aux_loss_coeff: 0.01
train:
  steps: $steps
  global_batch_size: 32
  micro_batches: $2
  seq_len: 64
  lr: 0.001
  warmup_steps: 2
  eval_sequences: 0
  log_interval: 100
data:
  dir: $out/data
run:
  dir: $out/$1
YAML
}

printf '| micro-batches m | measured bubble (stage 0 idle / step) | 1F1B (p-1)/(m+p-1) | median step s |\n|---:|---:|---:|---:|\n'
for m in $micro; do
  config "pp2_m$m" "$m" >"$out/pp2_m$m.yaml"
  "$tutti" run "$out/pp2_m$m.yaml" --quiet >"$out/pp2_m$m.log" 2>&1 \
    || { echo "run m=$m failed:"; tail -20 "$out/pp2_m$m.log"; exit 1; }
  python3 - "$out/pp2_m$m/metrics.jsonl" "$m" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
rows = [r for r in rows if r.get("step", 0) > 2]
m, p = int(sys.argv[2]), 2
bubble = statistics.median(r.get("time_pipeline_s", 0) / r["step_time_s"] for r in rows)
step = statistics.median(r["step_time_s"] for r in rows)
print(f"| {m} | {bubble:.3f} | {(p - 1) / (m + p - 1):.3f} | {step:.3f} |")
PY
done
