#!/usr/bin/env bash
# What the serving loop adds to a token, two builds against llama.cpp in
# one run on one core. The randomly initialised medium model
# (configs/medium.yaml) with its experts int8 (`tutti export --dtype int8`)
# is served by OLD's and NEW's `tutti serve` (configs/serve-medium.yaml,
# each pinned to core 0), and its Q8_0 GGUF export by llama.cpp
# (bench/peer/bench_llama.mjs, one thread, core 0). Each round, in turn:
# llama.cpp, OLD, NEW, at concurrency 1 and 8: REQUESTS requests of
# PROMPT random token ids, OUTPUT greedy tokens each, driven by NEW's
# `tutti bench serve`. Beside tokens/s, what the server's threads spent
# for each output token (CPU ms and context switches, from /proc: steadier
# than wall time on a machine shared with builds); the engine alone decodes
# in about `bench_serve decode 1 int8`'s time a token.
# Needs deploy/install-deps.sh --bench (node-llama-cpp in bench/peer).
# Usage: bench/bench_serve_loop.sh OLD_BUILD NEW_BUILD
#   env: ROUNDS=3 REQUESTS=16 PROMPT=128 OUTPUT=64
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
rounds=${ROUNDS:-3} requests=${REQUESTS:-16} prompt=${PROMPT:-128}
output=${OUTPUT:-64}
for b in "$old" "$new"; do
  [ -x "$b/apps/tutti" ] || { echo "bench_serve_loop: $b/apps/tutti missing" >&2; exit 2; }
done
[ -d bench/peer/node_modules/node-llama-cpp ] \
  || { echo "bench_serve_loop: node-llama-cpp missing (deploy/install-deps.sh --bench)" >&2; exit 1; }
tutti=$new/apps/tutti
scratch=$(mktemp -d /tmp/bench_serve_loop.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

"$tutti" export --init configs/medium.yaml --format hf --dtype int8 --out "$scratch/int8" >/dev/null
"$tutti" export --init configs/medium.yaml --format gguf --dtype q8_0 --out "$scratch/q8" >/dev/null
sed "s#runs/medium/export#$scratch/int8#" configs/serve-medium.yaml >"$scratch/serve.yaml"
declare -A url pid
for side in old new; do
  build=${!side}
  taskset -c 0 "$build/apps/tutti" serve "$scratch/serve.yaml" --listen 127.0.0.1:0 \
    >"$scratch/$side.log" 2>&1 &
  servers+=($!)
  pid[$side]=$!
  for _ in $(seq 1 600); do
    url[$side]=$(grep -so 'on http://[0-9.:]*' "$scratch/$side.log" | head -1 | cut -c4-) || true
    [ -n "${url[$side]}" ] && break
    sleep 0.1
  done
  [ -n "${url[$side]}" ] || { echo "bench_serve_loop: $side server did not start" >&2; cat "$scratch/$side.log" >&2; exit 1; }
done

# CPU ticks (utime + stime of every thread) and context switches of a process.
usage() {
  local ticks=0 switches=0 t
  for t in /proc/"$1"/task/*; do
    read -r -a f <<<"$(cut -d')' -f2- "$t/stat")"
    ticks=$((ticks + f[11] + f[12]))
    switches=$((switches + $(awk '/ctxt_switches/ {s += $2} END {print s}' "$t/status")))
  done
  echo "$ticks $switches"
}
hz=$(getconf CLK_TCK)
results=$scratch/results.jsonl
load() { cut -d' ' -f1 /proc/loadavg; }
for round in $(seq 1 "$rounds"); do
  l=$(load)
  (cd bench/peer && taskset -c 0 node bench_llama.mjs --gguf "$scratch/q8/model-q8_0.gguf" \
     --threads 1 --concurrency 1,8 --requests "$requests" --prompt-tokens "$prompt" \
     --output-tokens "$output" --seed "$round") \
    | sed "s/^{/{\"round\":$round,\"load\":$l,\"side\":\"llama.cpp\",/" >>"$results"
  for side in old new; do
    for c in 1 8; do
      l=$(load)
      read -r t0 s0 <<<"$(usage "${pid[$side]}")"
      "$tutti" bench serve --url "${url[$side]}" --concurrency "$c" --requests "$requests" \
        --prompt-tokens "$prompt" --output-tokens "$output" --seed "$round" \
        --no-progress --json "$scratch/tutti.json" >/dev/null
      read -r t1 s1 <<<"$(usage "${pid[$side]}")"
      python3 - "$scratch/tutti.json" "$round" "$l" "$side" \
        "$(( t1 - t0 ))" "$hz" "$(( s1 - s0 ))" "$((requests * output))" >>"$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
ticks, hz, switches, tokens = (float(x) for x in sys.argv[5:9])
print(json.dumps({"round": int(sys.argv[2]), "load": float(sys.argv[3]), "side": sys.argv[4],
    "concurrency": r["concurrency"], "output_tokens_per_s": r["output_token_throughput"],
    "tpot_ms_mean": r["tpot_ms"]["mean"], "cpu_ms_per_token": 1000 * ticks / hz / tokens,
    "switches_per_token": switches / tokens}))
PY
    done
  done
done

echo "bench_serve_loop $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), one core"
echo "old: $old, new: $new; medium model, experts int8 (llama.cpp: Q8_0), prompt $prompt, output $output, $requests requests, medians of $rounds rounds"
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"load average (1 min) during the runs: {min(r['load'] for r in rows):.1f} - {max(r['load'] for r in rows):.1f}")
print("| side | concurrency | output tok/s | TPOT ms | over llama.cpp | server CPU ms / token | context switches / token |")
print("|---|---:|---:|---:|---:|---:|---:|")
for c in (1, 8):
    pick = lambda side, key: statistics.median(
        [r[key] for r in rows if r["side"] == side and r["concurrency"] == c])
    anchor = pick("llama.cpp", "output_tokens_per_s")
    for side in ("llama.cpp", "old", "new"):
        tps = pick(side, "output_tokens_per_s")
        extra = ("- | -" if side == "llama.cpp" else
                 f"{pick(side, 'cpu_ms_per_token'):.3f} | {pick(side, 'switches_per_token'):.1f}")
        print(f"| {side} | {c} | {tps:.0f} | {pick(side, 'tpot_ms_mean'):.2f} | {tps / anchor:.2f} | {extra} |")
PY
