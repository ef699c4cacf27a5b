#!/usr/bin/env bash
# The layout benchmark: the same model and batch trained by `tutti
# run` on two ranks in each layout, interleaved over ROUNDS rounds, against
# (DP2·EP2) in the same round, and (TP2·PP2) on four ranks against
# (DP4·EP4): median step time (steps 6..STEPS) and the
# process's peak RSS (GNU time), next to `tutti plan`'s prediction for the
# process (every rank's total plus the checkpoint's host copies; the
# measured peak also holds the runtime and libraries, ~40 MB here).
#
#   bench/bench_layouts.sh [BUILD_DIR]
#   env: OUT (default /tmp/bench_layouts), STEPS (20), ROUNDS (2),
#        VOCAB (4096), SEQ (64), BATCH (8: the global batch), CAPACITY
#        (moe_config.capacity_factor, 0). A model where activations
#        matter: VOCAB=512 SEQ=512 BATCH=16; with CAPACITY=0 its experts'
#        rows follow the routing, which the plan takes as balanced.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
tutti=$build/apps/tutti
out=${OUT:-/tmp/bench_layouts}
steps=${STEPS:-20}
rounds=${ROUNDS:-2}
vocab=${VOCAB:-4096} seq=${SEQ:-64} batch=${BATCH:-8} capacity=${CAPACITY:-0}
[[ -x $tutti ]] || { echo "bench_layouts: $tutti is not built" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench_layouts: needs GNU time (apt-get install time)" >&2; exit 2; }

rm -rf "$out"
mkdir -p "$out"
"$tutti" data synth --out "$out/data" --vocab 64 --order 2 --seed 3 \
  --tokens 200000 >/dev/null

config() { # NAME CLUSTER_KEYS TRAIN_KEYS WORLD
  cat <<EOF
cluster_config:
  world_size: $4
  nnodes: 1
  nproc_per_node: $4
$2
model:
  vocab_size: $vocab
  hidden_size: 256
  intermediate_size: 768
  num_hidden_layers: 4
  num_attention_heads: 4
  num_key_value_heads: 2
  max_seq_len: $seq
moe_config:
  num_experts: 8
  router_top_k: 2
  capacity_factor: $capacity
  aux_loss_coeff: 0.01
  z_loss_coeff: 0.001
train:
  steps: $steps
  global_batch_size: $batch
  seq_len: $seq
  lr: 0.001
  warmup_steps: 2
  seed: 7
  eval_sequences: 0
  log_interval: 100
$3
data:
  dir: $out/data
run:
  dir: $out/run-$1
EOF
}

names=(dp2_ep2 dp2_m4 dp2_sharded dp2_moments_bf16 dp2_recompute_selective
  dp2_recompute_full tp2 pp2_m4 pp2_v2_m4 dp4_ep4 tp2_pp2_m4)
declare -A cluster train world
for name in "${names[@]}"; do world[$name]=2; done
world[dp4_ep4]=4; world[tp2_pp2_m4]=4
cluster[dp2_ep2]="  ep_size: 2";             train[dp2_ep2]=""
cluster[dp2_m4]="  ep_size: 2";              train[dp2_m4]="  micro_batches: 4"
cluster[dp2_sharded]="  ep_size: 2";         train[dp2_sharded]="  optimizer_sharding: true"
cluster[dp2_moments_bf16]="  ep_size: 2";    train[dp2_moments_bf16]="  precision: {moments: bf16}"
cluster[dp2_recompute_selective]="  ep_size: 2"; train[dp2_recompute_selective]="  recompute: selective"
cluster[dp2_recompute_full]="  ep_size: 2";  train[dp2_recompute_full]="  recompute: full"
cluster[tp2]="  tensor_model_parallel_size: 2"; train[tp2]=""
cluster[pp2_m4]="  pipeline_model_parallel_size: 2"; train[pp2_m4]="  micro_batches: 4"
cluster[pp2_v2_m4]="  pipeline_model_parallel_size: 2
  pipeline_virtual_stages: 2"; train[pp2_v2_m4]="  micro_batches: 4"
cluster[dp4_ep4]="  ep_size: 4";             train[dp4_ep4]=""
cluster[tp2_pp2_m4]="  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2"; train[tp2_pp2_m4]="  micro_batches: 4"

for name in "${names[@]}"; do
  config "$name" "${cluster[$name]}" "${train[$name]}" "${world[$name]}" \
    >"$out/$name.yaml"
  "$tutti" plan "$out/$name.yaml" --json >"$out/$name.plan.json"
done

for round in $(seq 1 "$rounds"); do
  for name in "${names[@]}"; do
    rm -rf "$out/run-$name"
    /usr/bin/time -f "peak_rss_kb=%M" -o "$out/$name.$round.time" \
      "$tutti" run "$out/$name.yaml" --quiet >"$out/$name.$round.log" 2>&1 ||
      { tail "$out/$name.$round.log"; exit 1; }
    cp "$out/run-$name/metrics.jsonl" "$out/$name.$round.metrics.jsonl"
  done
done

python3 - "$out" "$rounds" "${names[@]}" <<'EOF'
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def step_ms(name, r):
    rows = [json.loads(l) for l in open(f"{out}/{name}.{r}.metrics.jsonl") if l.strip()]
    return 1e3 * statistics.median(x["step_time_s"] for x in rows if x["step"] > 5)
def rss_mb(name, r):
    text = open(f"{out}/{name}.{r}.time").read()
    return int(text.split("peak_rss_kb=")[1].split()[0]) * 1024 / 1e6
def world(name):
    return 4 if name in ("dp4_ep4", "tp2_pp2_m4") else 2
def anchor(name):  # the data- and expert-parallel layout of the same world
    return "dp4_ep4" if world(name) == 4 else "dp2_ep2"
def planned_mb(name):
    m = json.load(open(f"{out}/{name}.plan.json"))["memory"]
    # Each stage's ranks hold its total (test_plan_memory's sum).
    ranks = world(name) / max(1, m["pipeline_stages"]) * m["total_all_stages"]
    other = m.get("checkpoint_host_all_other_ranks",
                  m.get("checkpoint_host_other_ranks", 0))
    return (ranks + m["checkpoint_host"] + other) / 1e6
print(f"{'layout':<24} {'step ms':>16} {'vs DP·EP':>12} "
      f"{'peak RSS MB':>14} {'vs DP·EP':>12} {'planned MB':>11}")
for name in names:
    steps = [step_ms(name, r) for r in range(1, rounds + 1)]
    rss = [rss_mb(name, r) for r in range(1, rounds + 1)]
    ratio = [s / step_ms(anchor(name), r) for r, s in enumerate(steps, 1)]
    mem = [m / rss_mb(anchor(name), r) for r, m in enumerate(rss, 1)]
    fmt = lambda v, f: " / ".join(f.format(x) for x in v)
    print(f"{name:<24} {fmt(steps, '{:.0f}'):>16} {fmt(ratio, '{:.2f}'):>12} "
          f"{fmt(rss, '{:.0f}'):>14} {fmt(mem, '{:.2f}'):>12} "
          f"{planned_mb(name):>11.0f}")
EOF
