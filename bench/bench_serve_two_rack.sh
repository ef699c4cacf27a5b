#!/usr/bin/env bash
# Serving on the two-rack testbed (deploy/testbed-two-racks.sh: 2 racks x 2
# nodes in network namespaces, node links INTRA_MBIT, the link between the
# racks INTER_MBIT = 1/8 of that): rack-aware placement's serving half.
#
# 1. Trains a small MoE briefly on topic data (`tutti data synth --topics
#    4`, one process, 4 ranks) so its routers co-activate experts in
#    groups, exports it (`tutti export`) and reads its routing statistics
#    (`tutti experts stats`).
# 2. Plans four placements for 4 nodes in 2 racks from them (`tutti
#    placement plan --method contiguous|eplb|tutti|affinity`; affinity also
#    reads the export, for each token's own experts).
# 3. Serves the export across 4 tuttid daemons, one per testbed node
#    (serve.racks: r0 r0 r1 r1), once per placement with the flat and with
#    the rack-aware all-to-all (serve.rack_aware_alltoall; six servers,
#    node 0 holding every sequence), then with every daemon holding
#    sequences (serve.data_parallel_attention) for the contiguous plan
#    (flat) and the affinity plan with each request started in its
#    prompt's rack (serve.rack_affinity; flat and rack-aware): nine
#    servers, one after another, each under the same `tutti bench serve` load from node
#    0's namespace, prompts cut from the topic data's held-out split
#    (--prompts-from), and prints per run: output tokens/s, TTFT p50/p99 and
#    the inter-rack all-to-all bytes per token the model processed
#    (prompt and generated, from node 0's /metrics, which counts the whole
#    group's bytes by link) and the requests placed on each daemon's
#    rank. After each load a greedy and a seeded
#    request must give every server the same tokens and log-probabilities
#    (the script fails otherwise).
#
#   bench/bench_serve_two_rack.sh [BUILD_DIR]
#   env: OUT (default /tmp/bench_serve_two_rack), TRAIN_STEPS (600),
#        EXPERTS (16), REQUESTS (32), CONCURRENCY (8), PROMPT (32), OUTPUT (32),
#        INTRA_MBIT (800), INTER_MBIT (INTRA/8), PORT (29750)
#
# Needs root, iproute2 and tc; exits 77 with the reason where network
# namespaces are not allowed. The testbed and every process it started go
# on any exit.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
tutti=$build/apps/tutti
tuttid=$build/apps/tuttid
testbed=$here/deploy/testbed-two-racks.sh
out=${OUT:-/tmp/bench_serve_two_rack}
train_steps=${TRAIN_STEPS:-600}
experts=${EXPERTS:-16}
requests=${REQUESTS:-32} concurrency=${CONCURRENCY:-8}
prompt=${PROMPT:-32} output=${OUTPUT:-32}
intra=${INTRA_MBIT:-800}
inter=${INTER_MBIT:-$((intra / 8))}
port=${PORT:-29750}
tag=s$(printf '%x' $$ | tail -c 5)

name=bench_serve_two_rack
source "$here/bench/testbed_common.sh"
testbed_preflight

rm -rf "$out"
mkdir -p "$out"
"$tutti" data synth --out "$out/data" --vocab 256 --topics 4 --seed 5 \
  --tokens 200000 >/dev/null

# A training job of the served model; CLUSTER differs: one process to
# train, the testbed's 4 nodes in 2 racks to plan for.
job_config() { # CLUSTER_YAML RUN_DIR
  cat <<EOF
cluster_config:
$1
  ep_size: 4
model:
  vocab_size: 256
  hidden_size: 128
  intermediate_size: 256
  num_hidden_layers: 4
  num_attention_heads: 4
  num_key_value_heads: 2
  max_seq_len: 128
moe_config:
  num_experts: $experts
  router_top_k: 2
  capacity_factor: 0
  aux_loss_coeff: 0.01
  z_loss_coeff: 0.001
  bias_update_rate: 0.001
  routing_stats_window: 20
train:
  steps: $train_steps
  global_batch_size: 16
  seq_len: 64
  lr: 0.003
  min_lr: 0.003
  warmup_steps: 0
  seed: 99
  eval_sequences: 0
  log_interval: 10
checkpoint:
  interval_steps: $train_steps
data:
  dir: $out/data
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
  nodes:
    - {host: 10.211.0.1, port: $((port + 1)), rack: r0}
    - {host: 10.211.0.2, port: $((port + 2)), rack: r0}
    - {host: 10.211.0.3, port: $((port + 3)), rack: r1}
    - {host: 10.211.0.4, port: $((port + 4)), rack: r1}"

echo "training $train_steps steps on topic data (one process, 4 ranks)"
job_config "$one_node" "$out/train" >"$out/train.yaml"
"$tutti" run "$out/train.yaml" --quiet >"$out/train.log" 2>&1 ||
  { tail "$out/train.log"; exit 1; }
"$tutti" experts stats "$out/train" --json "$out/stats.json" >/dev/null
ckpt=$(ls -d "$out/train/checkpoints"/step-* | sort | tail -1)
"$tutti" export "$ckpt" --format hf --out "$out/hf" >"$out/export.log" 2>&1 ||
  { cat "$out/export.log"; exit 1; }

job_config "$testbed_nodes" "$out/plan-only" >"$out/testbed.yaml"
for method in contiguous eplb tutti; do
  "$tutti" placement plan "$out/testbed.yaml" --stats "$out/stats.json" \
    --method "$method" --out "$out/$method.plan" >/dev/null
done
"$tutti" placement plan "$out/testbed.yaml" --stats "$out/stats.json" \
  --method affinity --model "$out/hf" --out "$out/affinity.plan" |
  grep '^affinity:' | tee "$out/affinity.txt"
"$tutti" placement plan "$out/testbed.yaml" --stats "$out/stats.json" |
  tee "$out/plan.txt"

"$testbed" up "$tag" "$intra" "$inter" >/dev/null
echo
echo "testbed $tag: node links $intra Mb/s, inter-rack $inter Mb/s; 4 daemons" \
  "(racks r0 r0 r1 r1), $requests requests at concurrency $concurrency," \
  "$prompt prompt + $output output tokens (greedy)"

in_node0() { "$testbed" exec "$tag" r0n0 "$@"; }

serve_on_testbed() { # NAME PLACEMENT RACK_AWARE RUN_INDEX [SEQUENCES_EVERYWHERE]
  local name=$1 http=$((port + 100 + 10 * $4)) rdv=$((port + 101 + 10 * $4))
  cat >"$out/$name.yaml" <<EOF
serve:
  model: $out/hf
  model_name: topic
  listen: 10.211.0.1:$http
  nodes: [10.211.0.1, 10.211.0.2, 10.211.0.3, 10.211.0.4]
  rendezvous_port: $rdv
  racks: [r0, r0, r1, r1]
  placement: $out/$2.plan
  rack_aware_alltoall: $3
  data_parallel_attention: ${5:-false}
  rack_affinity: $([[ $2 == affinity ]] && echo true || echo false)
  max_sequences: 16
  step_timeout_s: 60
EOF
  local nodes=(r0n0 r0n1 r1n0 r1n1) n pid
  procs=()
  for n in 3 2 1 0; do
    "$testbed" exec "$tag" "${nodes[$n]}" "$tuttid" --config "$out/$name.yaml" \
      --node-rank "$n" >"$out/$name-node$n.log" 2>&1 &
    procs+=($!)
  done
  local url=http://10.211.0.1:$http deadline=$((SECONDS + 120))
  until [[ $(in_node0 curl -s -o /dev/null -w '%{http_code}' "$url/ready") == 200 ]]; do
    if ((SECONDS > deadline)); then
      echo "bench_serve_two_rack: $name not ready in 120 s" >&2
      tail "$out/$name-node0.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  timeout 600 "$testbed" exec "$tag" r0n0 "$tutti" bench serve --url "$url" \
    --model topic --requests "$requests" --concurrency "$concurrency" \
    --prompt-tokens "$prompt" --output-tokens "$output" \
    --prompts-from "$out/data" \
    --seed 3 --no-progress --json "$out/$name.json" >"$out/$name-bench.log" 2>&1 ||
    { echo "bench_serve_two_rack: $name: tutti bench serve failed" >&2;
      tail "$out/$name-bench.log" >&2; exit 1; }
  # A greedy and a seeded request after the load: every server must give
  # the same tokens and log-probabilities (placement and exchange move
  # rows, never change numbers).
  local seed
  for seed in greedy seeded; do
    local body='{"prompt": [5, 17, 42, 99, 3, 200, 7, 64], "max_tokens": 16, "logprobs": 1, "temperature": 0}'
    [[ $seed == seeded ]] && body='{"prompt": [9, 1, 250, 33], "max_tokens": 16, "logprobs": 1, "temperature": 0.9, "seed": 7}'
    in_node0 curl -s -H 'Content-Type: application/json' -d "$body" \
      "$url/v1/completions" |
      python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["logprobs"], sort_keys=True))' \
      >"$out/$name.$seed.json"
  done
  # The other daemons' bytes reach node 0 with its next step header (the
  # idle keep-alive, each second).
  sleep 2
  in_node0 curl -s "$url/metrics" >"$out/$name.prom"
  echo "$load" >"$out/$name.load"
  for pid in "${procs[@]}"; do kill "$pid" 2>/dev/null || true; done
  deadline=$((SECONDS + 30))
  for pid in "${procs[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  procs=()
}

names=()
i=0
for method in contiguous eplb tutti; do
  for rack_aware in false true; do
    name=$method-$([[ $rack_aware == true ]] && echo rack-aware || echo flat)
    serve_on_testbed "$name" "$method" "$rack_aware" "$i"
    names+=("$name")
    i=$((i + 1))
  done
done
# Every daemon holding sequences (serve.data_parallel_attention): the
# contiguous placement, and the affinity plan with each request started in
# its prompt's rack (serve.rack_affinity), flat and rack-aware.
for run in contiguous:false affinity:false affinity:true; do
  method=${run%:*} rack_aware=${run#*:}
  name=dp-$method-$([[ $rack_aware == true ]] && echo rack-aware || echo flat)
  serve_on_testbed "$name" "$method" "$rack_aware" "$i" true
  names+=("$name")
  i=$((i + 1))
done

echo
python3 - "$out" "${names[@]}" <<'PY'
import json, re, sys
out, names = sys.argv[1], sys.argv[2:]
def metric(text, name, labels=""):
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*" + re.escape(labels)
                  + r"[^}]*\} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
print(f"{'placement, all-to-all':<24} {'load':>5} {'done':>5} {'tok/s':>7} "
      f"{'TTFT p50':>9} {'TTFT p99':>9} {'x-rack B/tok':>12} {'x-rack share':>12} "
      f"{'placed r0..r3':>14}")
for n in names:
    r = json.load(open(f"{out}/{n}.json"))
    r = r[0] if isinstance(r, list) else r
    prom = open(f"{out}/{n}.prom").read()
    tokens = (metric(prom, "tutti_serve_prompt_tokens_total")
              + metric(prom, "tutti_serve_generation_tokens_total"))
    inter = metric(prom, "tutti_serve_alltoall_bytes_total", 'link="inter_rack"')
    share = metric(prom, "tutti_serve_alltoall_cross_rack_share")
    load = float(open(f"{out}/{n}.load").read())
    placed = "/".join(str(int(metric(prom, "tutti_serve_requests_placed_on_rank_total",
                                     f'rank="{r}"'))) for r in range(4))
    print(f"{n:<24} {load:>5.2f} {r['completed']:>5} "
          f"{r['output_token_throughput']:>7.1f} {r['ttft_ms']['p50']:>9.1f} "
          f"{r['ttft_ms']['p99']:>9.1f} {inter / max(tokens, 1):>12.0f} "
          f"{share:>12.3f} {placed:>14}")
PY
same=yes
for name in "${names[@]}"; do
  for seed in greedy seeded; do
    cmp -s "$out/${names[0]}.$seed.json" "$out/$name.$seed.json" || same=no
  done
done
echo "greedy and seeded tokens and logprobs of the ${#names[@]} servers the same bits: $same"
[[ $same == yes ]]
