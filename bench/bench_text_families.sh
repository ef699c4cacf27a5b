#!/usr/bin/env bash
# The MoE families on real text: the Python documentation's sources
# (configs/text.yaml's data), 1,000 steps each, the same tokens, schedule
# and active parameters:
#   dense          configs/text-dense.yaml (one FFN of width 256)
#   mixtral        configs/text.yaml (top-2 of 8 experts of width 128)
#   fine-grained   configs/text-deepseek.yaml (a shared expert of 64, top-6
#                  of 30 routed experts of 32, sigmoid router, unrestricted)
#   rack-limited   the same with n_group 2, topk_group 1: each token's
#                  experts in one of the two racks
# The MoE runs put their two ranks on two nodes in two racks (loopback,
# one process, the rack-aware all-to-all), so each reports its all-to-all
# bytes across the racks per token; the exchange changes traffic, never
# the numbers. Prints held-out loss at every evaluation, the last one's
# ratio to dense, cross-rack bytes per token and median step time.
#
# Needs Debian's python3-doc (the text).
# Usage: bench/bench_text_families.sh [BUILD_DIR]   (env STEPS=1000, PORT=29710)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
steps=${STEPS:-1000}
port=${PORT:-29710}
tutti=$build/apps/tutti
docs=/usr/share/doc/python3.11/html/_sources
[ -x "$tutti" ] || { echo "bench_text_families: $tutti not built" >&2; exit 1; }
[ -d "$docs" ] || { echo "bench_text_families: $docs missing (python3-doc)" >&2; exit 1; }
scratch=$(mktemp -d /tmp/bench_text_families.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

"$tutti" data tokenizer train --input "$docs" --vocab 4096 --out "$scratch/tok" >/dev/null
"$tutti" data prepare --input "$docs" --tokenizer "$scratch/tok" \
  --out "$scratch/data" >/dev/null

# CONFIG NAME [sed expressions...]: the config with this run's data, run
# directory and steps (and the expressions), run.
train() {
  local config=$1 name=$2
  shift 2
  sed -e "s|^  dir: runs/text/data$|  dir: $scratch/data|" \
      -e "s|^  dir: runs/text.*$|  dir: $scratch/$name|" \
      -e "s|^  steps: 1000$|  steps: $steps|" "$@" \
      "configs/$config" >"$scratch/$name.yaml"
  grep -q "dir: $scratch/$name$" "$scratch/$name.yaml" \
    || { echo "bench_text_families: configs/$config has no run.dir line" >&2; exit 1; }
  "$tutti" run "$scratch/$name.yaml" --quiet >"$scratch/$name.log" 2>&1 \
    || { echo "bench_text_families: $name failed:" >&2; tail -5 "$scratch/$name.log" >&2; exit 1; }
}
# Two nodes of one rank each, in racks r0 and r1, and the rack-aware exchange.
two_racks=(-e "s|^  nnodes: 1$|  nnodes: 2|"
  -e "s|^  nproc_per_node: 2$|  nproc_per_node: 1\n  local_transport: memory\n  nodes:\n    - {host: 127.0.0.1, port: $port, rack: r0}\n    - {host: 127.0.0.1, port: $((port + 1)), rack: r1}|"
  -e "s|^  capacity_factor: 0 .*$|&\n  rack_aware_alltoall: true|")

train text-dense.yaml dense
train text.yaml mixtral "${two_racks[@]}"
train text-deepseek.yaml fine-grained "${two_racks[@]}"
train text-deepseek.yaml rack-limited "${two_racks[@]}" \
  -e "s|^  n_group: 1$|  n_group: 2|"
grep -q "rack-limited routing" "$scratch/rack-limited/tutti.log.jsonl" \
  || { echo "bench_text_families: the rack-limited run did not say it was" >&2; exit 1; }

echo "bench_text_families $(date -u '+%Y-%m-%d %H:%M UTC'), $steps steps, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
python3 - "$scratch" dense mixtral fine-grained rack-limited <<'PY'
import json, statistics, sys
scratch, names = sys.argv[1], sys.argv[2:]
runs = {}
for name in names:
    rows = [json.loads(l) for l in open(f"{scratch}/{name}/metrics.jsonl")]
    evals = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
    times = [r["step_time_s"] for r in rows if "step_time_s" in r]
    times = times[3:] or times  # past the first steps' warm-up
    cross = [r["alltoall_bytes_by_link"]["inter_rack"] / r["tokens"]
             for r in rows if "alltoall_bytes_by_link" in r and r.get("tokens")]
    runs[name] = (evals, statistics.median(times),
                  statistics.mean(cross) if cross else None)
steps = sorted(runs["dense"][0])
print("| model | " + " | ".join(f"held-out loss @{s}" for s in steps)
      + " | last / dense | cross-rack bytes per token | median step |")
print("|---|" + "---:|" * (len(steps) + 3))
last = steps[-1]
for name in names:
    evals, t, cross = runs[name]
    print(f"| {name} | " + " | ".join(f"{evals.get(s, float('nan')):.4f}" for s in steps)
          + f" | {evals[last] / runs['dense'][0][last]:.3f}"
          + f" | {'-' if cross is None else f'{cross:.0f}'} | {1000 * t:.1f} ms |")
PY
