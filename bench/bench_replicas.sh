#!/usr/bin/env bash
# In-memory replicas' cost (elastic.replica_interval_steps): the medium
# model on two nodes of one rank (`tutti run`: both nodes in one process,
# so the copies cross the in-memory transport, not a network) with no
# copies, a copy every 10 steps and every step, interleaved over ROUNDS
# rounds: median and mean step time (steps 6..STEPS) and the process's
# peak RSS, against no copies in the same round with the allocator set as
# replicas set it (elastic/replica_memory.hpp; "off" runs glibc's
# defaults), beside `tutti plan`'s replicas_host_all_nodes (both nodes'
# copies at their peak: four steps of each rank's own state and of its
# peer's).
#
#   bench/bench_replicas.sh [BUILD_DIR]
#   env: OUT (default /tmp/bench_replicas), STEPS (30), ROUNDS (3)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
tutti=$build/apps/tutti
out=${OUT:-/tmp/bench_replicas}
steps=${STEPS:-30}
rounds=${ROUNDS:-3}
[[ -x $tutti ]] || { echo "bench_replicas: $tutti is not built" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench_replicas: needs GNU time (apt-get install time)" >&2; exit 2; }

rm -rf "$out"
mkdir -p "$out"
"$tutti" data synth --out "$out/data" --vocab 256 --order 2 --seed 3 \
  --tokens 400000 >/dev/null

config() { # NAME INTERVAL
  cat <<YAML
cluster_config:
  world_size: 2
  nnodes: 2
  nproc_per_node: 1
  ep_size: 2
model:
  vocab_size: 256
  hidden_size: 256
  intermediate_size: 512
  num_hidden_layers: 4
  num_attention_heads: 8
  num_key_value_heads: 4
  max_seq_len: 256
moe_config:
  num_experts: 8
  router_top_k: 2
train:
  steps: $steps
  global_batch_size: 8
  seq_len: 256
  lr: 0.001
  warmup_steps: 2
  seed: 7
  eval_sequences: 0
  log_interval: 100
data:
  dir: $out/data
run:
  dir: $out/run-$1
checkpoint:
  interval_steps: 0
elastic:
  replica_interval_steps: $2
YAML
}

names=(off off_tuned k10 k1)
declare -A interval=([off]=0 [off_tuned]=0 [k10]=10 [k1]=1)
# What keep_memory_for_replicas sets, for the run without copies.
tuned="MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=33554432"
tuned+=" MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=268435456"
for name in "${names[@]}"; do
  config "$name" "${interval[$name]}" >"$out/$name.yaml"
  "$tutti" plan "$out/$name.yaml" --json >"$out/$name.plan.json"
done
for round in $(seq 1 "$rounds"); do
  for name in "${names[@]}"; do
    rm -rf "$out/run-$name"
    allocator=""
    [[ $name == off_tuned ]] && allocator=$tuned
    /usr/bin/time -f "peak_rss_kb=%M" -o "$out/$name.$round.time" \
      env $allocator "$tutti" run "$out/$name.yaml" --quiet \
      >"$out/$name.$round.log" 2>&1 ||
      { tail "$out/$name.$round.log"; exit 1; }
    cp "$out/run-$name/metrics.jsonl" "$out/$name.$round.metrics.jsonl"
  done
done

python3 - "$out" "$rounds" "${names[@]}" <<'PY'
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def step_ms(name, r):
    rows = [json.loads(l) for l in open(f"{out}/{name}.{r}.metrics.jsonl") if l.strip()]
    return 1e3 * statistics.median(x["step_time_s"] for x in rows if x["step"] > 5)
def mean_ms(name, r):
    rows = [json.loads(l) for l in open(f"{out}/{name}.{r}.metrics.jsonl") if l.strip()]
    return 1e3 * statistics.mean(x["step_time_s"] for x in rows if x["step"] > 5)
def rss_mb(name, r):
    text = open(f"{out}/{name}.{r}.time").read()
    return int(text.split("peak_rss_kb=")[1].split()[0]) * 1024 / 1e6
def planned_mb(name):
    m = json.load(open(f"{out}/{name}.plan.json"))["memory"]
    return m.get("replicas_host_all_nodes", 0) / 1e6
fmt = lambda v, f: " / ".join(f.format(x) for x in v)
print(f"{'copies':<10} {'median step ms':>20} {'mean step ms':>20} "
      f"{'mean vs none':>18} {'peak RSS MB':>16} {'+MB vs none':>16} "
      f"{'planned +MB':>11}")
R = range(1, rounds + 1)
for name in names:
    med = [step_ms(name, r) for r in R]
    mean = [mean_ms(name, r) for r in R]
    ratio = [mean_ms(name, r) / mean_ms("off_tuned", r) for r in R]
    rss = [rss_mb(name, r) for r in R]
    extra = [rss_mb(name, r) - rss_mb("off_tuned", r) for r in R]
    print(f"{name:<10} {fmt(med, '{:.1f}'):>20} {fmt(mean, '{:.1f}'):>20} "
          f"{fmt(ratio, '{:.3f}'):>18} {fmt(rss, '{:.0f}'):>16} "
          f"{fmt(extra, '{:+.0f}'):>16} {planned_mb(name):>11.1f}")
PY
