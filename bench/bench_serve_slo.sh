#!/usr/bin/env bash
# The highest Poisson request rate at which `tutti serve` meets MLPerf's
# Mixtral server limits (TTFT p99 <= 2 s, TPOT p99 <= 200 ms) on the medium
# model (configs/medium.yaml, random weights; configs/serve-medium.yaml's
# limits). `tutti bench serve` sends REQUESTS streaming requests of PROMPT
# random token ids and OUTPUT greedy tokens at each rate (Poisson arrivals,
# no concurrency cap): the rate doubles from START until a limit is missed,
# then STEPS bisections between the last rate that met both and the first
# that did not. The anchor, measured in the same run: the same requests one
# at a time (concurrency 1), the latencies of an unloaded server. The load
# average is recorded with every run.
#
# Usage: bench/bench_serve_slo.sh [BUILD_DIR]
#   (REQUESTS=120 PROMPT=128 OUTPUT=128 START=4 STEPS=4 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
requests=${REQUESTS:-120} prompt=${PROMPT:-128} output=${OUTPUT:-128}
start=${START:-4} steps=${STEPS:-4}
tutti=$build/apps/tutti
[ -x "$tutti" ] || { echo "bench_serve_slo: $tutti not built" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_serve_slo.XXXXXX)
server=
cleanup() {
  [ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  rm -rf "$scratch"
}
trap cleanup EXIT

"$tutti" export --init configs/medium.yaml --format hf --out "$scratch/hf" >/dev/null
sed -e "s#runs/medium/export#$scratch/hf#" configs/serve-medium.yaml >"$scratch/serve.yaml"
"$tutti" serve "$scratch/serve.yaml" --listen 127.0.0.1:0 >"$scratch/serve.log" 2>&1 &
server=$!
url=
for _ in $(seq 1 300); do
  url=$(grep -o 'on http://[0-9.:]*' "$scratch/serve.log" | head -1 | cut -c4-) || true
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { echo "bench_serve_slo: tutti serve did not start" >&2; cat "$scratch/serve.log" >&2; exit 1; }

results=$scratch/results.jsonl
# run RATE CONCURRENCY: one `tutti bench serve` run, appended as a JSON line.
run() {
  local l; l=$(cut -d' ' -f1 /proc/loadavg)
  "$tutti" bench serve --url "$url" --rate "$1" --concurrency "$2" \
    --requests "$requests" --prompt-tokens "$prompt" --output-tokens "$output" \
    --slo ttft=2000ms,tpot=200ms --no-progress --json "$scratch/run.json" >/dev/null
  python3 - "$scratch/run.json" "$1" "$l" >>"$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r = r[0] if isinstance(r, list) else r
print(json.dumps({"rate": float(sys.argv[2]), "load": float(sys.argv[3]),
    "concurrency": r["concurrency"], "completed": r["completed"], "failed": r["failed"],
    "ttft_p99": r["ttft_ms"]["p99"], "tpot_p99": r["tpot_ms"]["p99"],
    "ttft_p50": r["ttft_ms"]["p50"], "tpot_p50": r["tpot_ms"]["p50"],
    "req_s": r["request_throughput"], "tok_s": r["output_token_throughput"],
    "goodput": r["goodput"]}))
PY
  tail -1 "$results"
}
# meets RATE: whether the last run met both limits with no failed request.
meets() {
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]);
sys.exit(0 if r["failed"] == 0 and r["ttft_p99"] <= 2000 and r["tpot_p99"] <= 200 else 1)' "$(tail -1 "$results")"
}

run 0 1 >/dev/null # the anchor: one request at a time
good=0 bad=0 rate=$start
while :; do
  run "$rate" 0 >/dev/null
  if meets; then good=$rate; rate=$(python3 -c "print($rate * 2)"); else bad=$rate; break; fi
  python3 -c "import sys; sys.exit(0 if $rate <= 4096 else 1)" || break
done
if [ "$bad" != 0 ]; then
  for _ in $(seq 1 "$steps"); do
    rate=$(python3 -c "print(round(($good + $bad) / 2, 2))")
    run "$rate" 0 >/dev/null
    if meets; then good=$rate; else bad=$rate; fi
  done
fi

echo "bench_serve_slo $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "medium model, prompt $prompt, output $output, $requests requests per run, Poisson arrivals, limits TTFT p99 2000 ms, TPOT p99 200 ms"
python3 - "$results" "$good" "$bad" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
good, bad = float(sys.argv[2]), float(sys.argv[3])
print(f"load average (1 min) during the runs: {min(r['load'] for r in rows):.1f} - {max(r['load'] for r in rows):.1f}")
print("| run | rate (req/s) | load | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | req/s done | output tok/s | goodput (req/s) | meets both |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    name = "anchor: one at a time" if r["concurrency"] == 1 else (
        "highest that meets" if r["rate"] == good else
        "lowest that misses" if r["rate"] == bad else "search")
    ok = r["failed"] == 0 and r["ttft_p99"] <= 2000 and r["tpot_p99"] <= 200
    rate = "-" if r["concurrency"] == 1 else f"{r['rate']:g}"
    print(f"| {name} | {rate} | {r['load']:.1f} | {r['ttft_p50']:.1f} / {r['ttft_p99']:.1f} | "
          f"{r['tpot_p50']:.2f} / {r['tpot_p99']:.2f} | {r['req_s']:.2f} | {r['tok_s']:.1f} | "
          f"{r['goodput']:.2f} | {'yes' if ok else 'no'} |")
print(f"highest rate meeting both limits: {good:g} req/s" + (f" (misses at {bad:g})" if bad else " (never missed up to the search's cap)"))
PY
