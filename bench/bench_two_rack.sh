#!/usr/bin/env bash
# Rack-aware placement's benchmark on the two-rack testbed (deploy/testbed-two-racks.sh:
# 2 racks x 2 nodes in network namespaces, node links INTRA_MBIT, the link
# between the racks INTER_MBIT = 1/8 of that).
#
# 1. Pretrains a MoE on topic data (`tutti data synth --topics`) in one
#    process, so its routers co-activate experts in groups, and reads the
#    routing statistics it kept (`tutti experts stats`).
# 2. Plans four placements for 4 nodes in 2 racks from them (`tutti
#    placement plan --method contiguous|eplb|tutti|affinity`; affinity also
#    reads the checkpoint exported, for each token's own experts).
# 3. Continues the job from the same checkpoint for STEPS steps across 4
#    tuttid daemons on the testbed, once per placement, with the flat and
#    with the rack-aware all-to-all (eight runs; the affinity plan's with
#    data.rack_affinity, windows dealt to the rack of their experts), and
#    prints per run: measured cross-rack bytes per token, the median step
#    and all-to-all times, and the last loss (placement and the rack-aware
#    all-to-all change traffic, never numbers: the six other loss series
#    must be the same bits; the affinity runs' within float rounding).
#
#   bench/bench_two_rack.sh [BUILD_DIR]
#   env: OUT (default /tmp/bench_two_rack), PRETRAIN_STEPS (600), STEPS (10),
#        EXPERTS (16), INTRA_MBIT (800),
#        INTER_MBIT (INTRA/8), PORT (29650),
#        DISPATCH_DTYPE (fp32: moe_config.dispatch_dtype of the eight runs
#        on the testbed; the pretraining is fp32 whatever it says)
#
# Needs root, iproute2 and tc; exits 77 with the reason where network
# namespaces are not allowed. The testbed and every daemon go on any exit.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
tutti=$build/apps/tutti
tuttid=$build/apps/tuttid
testbed=$here/deploy/testbed-two-racks.sh
out=${OUT:-/tmp/bench_two_rack}
pretrain_steps=${PRETRAIN_STEPS:-600}
steps=${STEPS:-10}
experts=${EXPERTS:-16}
intra=${INTRA_MBIT:-800}
inter=${INTER_MBIT:-$((intra / 8))}
port=${PORT:-29650}
dispatch_dtype=${DISPATCH_DTYPE:-fp32}
tag=b$(printf '%x' $$ | tail -c 5)

name=bench_two_rack
source "$here/bench/testbed_common.sh"
testbed_preflight

rm -rf "$out"
mkdir -p "$out"
"$tutti" data synth --out "$out/data" --vocab 256 --topics 4 --seed 5 \
  --tokens 300000 >/dev/null

# The model and the job; CLUSTER and the run's keys differ per run.
job_config() { # CLUSTER_YAML RUN_DIR STEPS EXTRA_MOE_KEYS [EXTRA_DATA_KEYS]
  cat <<EOF
cluster_config:
$1
  ep_size: 4
  collective_timeout_ms: 30000
model:
  vocab_size: 256
  hidden_size: 128
  intermediate_size: 256
  num_hidden_layers: 4
  num_attention_heads: 4
  num_key_value_heads: 2
  max_seq_len: 64
moe_config:
  num_experts: $experts
  router_top_k: 2
  capacity_factor: 0
  aux_loss_coeff: 0.01
  z_loss_coeff: 0.001
  bias_update_rate: 0.001
  routing_stats_window: 20
$4
train:
  steps: $3
  global_batch_size: 16
  seq_len: 64
  lr: 0.003
  min_lr: 0.003
  warmup_steps: 0
  seed: 99
  eval_sequences: 0
  log_interval: 10
checkpoint:
  interval_steps: $pretrain_steps
data:
  dir: $out/data
${5:-}
run:
  dir: $2
EOF
}

one_node="  world_size: 4
  nnodes: 1
  nproc_per_node: 4"
testbed_nodes="  world_size: 4
  nnodes: 4
  nproc_per_node: 1
  coordinator: 10.211.0.1:$port
  join_timeout_s: 60
  nodes:
    - {host: 10.211.0.1, port: $((port + 1)), rack: r0}
    - {host: 10.211.0.2, port: $((port + 2)), rack: r0}
    - {host: 10.211.0.3, port: $((port + 3)), rack: r1}
    - {host: 10.211.0.4, port: $((port + 4)), rack: r1}"

echo "pretraining $pretrain_steps steps on topic data (one process, 4 ranks)"
job_config "$one_node" "$out/pretrain" "$pretrain_steps" "" >"$out/pretrain.yaml"
"$tutti" run "$out/pretrain.yaml" --quiet >"$out/pretrain.log" 2>&1 ||
  { tail "$out/pretrain.log"; exit 1; }
"$tutti" experts stats "$out/pretrain" --json "$out/stats.json" >/dev/null
"$tutti" export "$(ls -d "$out"/pretrain/checkpoints/step-* | tail -1)" \
  --format hf --out "$out/export" >/dev/null

job_config "$testbed_nodes" "$out/plan-only" "$steps" \
  "  dispatch_dtype: $dispatch_dtype" >"$out/testbed.yaml"
for method in contiguous eplb tutti; do
  "$tutti" placement plan "$out/testbed.yaml" --stats "$out/stats.json" \
    --method "$method" --out "$out/$method.plan" >/dev/null
done
"$tutti" placement plan "$out/testbed.yaml" --stats "$out/stats.json" \
  --method affinity --model "$out/export" --out "$out/affinity.plan" |
  grep '^affinity:' | tee "$out/affinity.txt"
"$tutti" placement plan "$out/testbed.yaml" --stats "$out/stats.json" |
  tee "$out/plan.txt"

"$testbed" up "$tag" "$intra" "$inter" >/dev/null
echo
echo "testbed $tag: node links $intra Mb/s, inter-rack $inter Mb/s;" \
  "continuing $steps steps from step $pretrain_steps, 4 daemons," \
  "dispatch $dispatch_dtype"

run_on_testbed() { # NAME PLACEMENT RACK_AWARE [RACK_AFFINITY]
  local name=$1 dir=$out/$1
  cp -a "$out/pretrain" "$dir"
  local moe="  placement: $out/$2.plan
  rack_aware_alltoall: $3
  dispatch_dtype: $dispatch_dtype"
  job_config "$testbed_nodes" "$dir" $((pretrain_steps + steps)) "$moe" \
    "  rack_affinity: ${4:-false}" >"$out/$name.yaml"
  procs=()
  local nodes=(r0n0 r0n1 r1n0 r1n1)
  for n in 3 2 1 0; do
    "$testbed" exec "$tag" "${nodes[$n]}" "$tuttid" --config "$out/$name.yaml" \
      --node-rank "$n" >"$out/$name-node$n.log" 2>&1 &
    procs+=($!)
  done
  local deadline=$((SECONDS + 600)) pid
  for pid in "${procs[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do
      if ((SECONDS > deadline)); then
        echo "bench_two_rack: $name did not finish in 600 s" >&2
        tail "$out/$name-node0.log" >&2
        exit 1
      fi
      sleep 0.5
    done
    wait "$pid" || { echo "bench_two_rack: $name: a daemon failed" >&2;
                     tail "$out/$name-node0.log" >&2; exit 1; }
  done
  procs=()
}

summarise() { # NAME -> one line
  python3 - "$out/$1/metrics.jsonl" "$pretrain_steps" "$1" <<'EOF'
import json, statistics, sys
path, first, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if r["step"] > first]
inter = sum(r["alltoall_bytes_by_link"]["inter_rack"] for r in rows)
tokens = sum(r["tokens"] for r in rows)
step = statistics.median(r["step_time_s"] for r in rows)
a2a = statistics.median(r["time_alltoall_s"] for r in rows)
losses = ",".join(repr(r["loss"]) for r in rows)
print(f"{name:<22} {inter / tokens:>12.0f} {step * 1e3:>10.0f} "
      f"{a2a * 1e3:>10.0f} {rows[-1]['loss']:>10.6f}")
open(path + ".losses", "w").write(losses)
EOF
}

names=()
for rack_aware in false true; do
  for method in contiguous eplb tutti affinity; do
    name=$method-$([[ $rack_aware == true ]] && echo rack-aware || echo flat)
    run_on_testbed "$name" "$method" "$rack_aware" \
      "$([[ $method == affinity ]] && echo true || echo false)"
    names+=("$name")
  done
done

echo
printf '%-22s %12s %10s %10s %10s\n' "placement, all-to-all" "x-rack B/tok" \
  "step ms" "a2a ms" "last loss"
for name in "${names[@]}"; do summarise "$name"; done
same=yes
for name in "${names[@]}"; do
  [[ $name == affinity-* ]] && continue
  cmp -s "$out/${names[0]}/metrics.jsonl.losses" \
    "$out/$name/metrics.jsonl.losses" || same=no
done
echo "loss series of the six runs dealt by the batch the same bits: $same"
# Dealt by affinity: which rank sums which window changes the rounding.
close=$(python3 - "$out" "${names[0]}" <<'EOF'
import sys
out, first = sys.argv[1], sys.argv[2]
read = lambda n: [float(x) for x in open(f"{out}/{n}/metrics.jsonl.losses").read().split(",")]
base = read(first)
print(f"{max(abs(a - b) for n in ('affinity-flat', 'affinity-rack-aware') for a, b in zip(read(n), base)):.2e}")
EOF
)
echo "affinity runs' largest loss difference from ${names[0]}: $close"
[[ $same == yes ]] && python3 -c "import sys; sys.exit(0 if $close <= 1e-4 else 1)"
