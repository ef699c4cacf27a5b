#!/usr/bin/env bash
# The pipeline-bubble benchmark: one small MoE trained on PP2 (two ranks
# in one process, one stage each) with M micro-batches for each M in
# MICRO and V model chunks a stage for each V in VIRTUAL (V 1: plain 1F1B;
# V > 1: interleaved 1F1B), and per run the measured bubble of stage 0
# against the formula (p-1)/(V m+p-1).
#
# Measured bubble: the median over steps (after the first 2) of the
# step's pipeline_bubble (metrics.jsonl): 1 - (both stages' computing time
# in the schedule, summed) / (2 x the longer stage's schedule wall time),
# the share of stage-time spent idle, which is what the formula counts.
# The schedule leaves out the step's gradient sums and optimizer, as the
# formula does. Beside it, stage 0's own idle share (time_pipeline_s over
# time_pipeline_schedule_s). The formula takes every forward (and every
# backward) to cost the same on both stages; the embedding, the LM head
# and the threads the two stages share on a small machine make them
# differ, the exchanges add their own time, and V chunks make V times the
# exchanges.
#
#   bench/bench_pipeline.sh [BUILD_DIR]
#   env: OUT (default /tmp/bench_pipeline), STEPS (12), MICRO ("4 8"),
#        VIRTUAL ("1 2 4"), LAYERS (8), HIDDEN (128; the experts' width
#        twice it), BATCH (32 sequences of 64 tokens a step), KEEP
#        (train.keep_expert_activations: false runs the experts' forward
#        again before most backwards, true keeps one per micro-batch)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
tutti=$build/apps/tutti
out=${OUT:-/tmp/bench_pipeline}
steps=${STEPS:-12}
micro=${MICRO:-"4 8"}
virtual=${VIRTUAL:-"1 2 4"}
layers=${LAYERS:-8}
hidden=${HIDDEN:-128}
batch=${BATCH:-32}
keep=${KEEP:-false}
rm -rf "$out" && mkdir -p "$out"
"$tutti" data synth --out "$out/data" --vocab 256 --seed 5 --tokens 400000 >/dev/null

config() { # NAME MICRO_BATCHES VIRTUAL_STAGES
  cat <<YAML
cluster_config:
  world_size: 2
  nnodes: 1
  nproc_per_node: 2
  ep_size: 1
  pipeline_model_parallel_size: 2
  pipeline_virtual_stages: $3
  collective_timeout_ms: 60000
model:
  vocab_size: 256
  hidden_size: $hidden
  intermediate_size: $((2 * hidden))
  num_hidden_layers: $layers
  num_attention_heads: 4
  num_key_value_heads: 2
  max_seq_len: 64
moe_config:
  num_experts: 4
  router_top_k: 2
  aux_loss_coeff: 0.01
train:
  steps: $steps
  global_batch_size: $batch
  micro_batches: $2
  keep_expert_activations: $keep
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

printf '| micro-batches m | chunks a stage V | measured bubble (all stages idle / stage-time) | formula (p-1)/(V m+p-1) | measured / formula | stage 0 idle / its schedule | median schedule s | median step s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for m in $micro; do
  for v in $virtual; do
    name=pp2_m${m}_v$v
    config "$name" "$m" "$v" >"$out/$name.yaml"
    "$tutti" run "$out/$name.yaml" --quiet >"$out/$name.log" 2>&1 \
      || { echo "run m=$m v=$v failed:"; tail -20 "$out/$name.log"; exit 1; }
    python3 - "$out/$name/metrics.jsonl" "$m" "$v" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
rows = [r for r in rows if r.get("step", 0) > 2]
m, v, p = int(sys.argv[2]), int(sys.argv[3]), 2
bubble = statistics.median(r["pipeline_bubble"] for r in rows)
stage0 = statistics.median(r.get("time_pipeline_s", 0) / r["time_pipeline_schedule_s"] for r in rows)
schedule = statistics.median(r["time_pipeline_schedule_s"] for r in rows)
step = statistics.median(r["step_time_s"] for r in rows)
formula = (p - 1) / (v * m + p - 1)
print(f"| {m} | {v} | {bubble:.3f} | {formula:.3f} | {bubble / formula:.2f} | {stage0:.3f} | {schedule:.3f} | {step:.3f} |")
PY
  done
done
