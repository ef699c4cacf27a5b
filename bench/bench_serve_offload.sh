#!/usr/bin/env bash
# What offloading rarely used experts costs a served model (serve.offload):
# the medium model (configs/medium.yaml, random weights) served by EP ranks
# in one process, first with the contiguous placement, then with the
# experts used below THRESHOLD of their layer's tokens in the first run's
# traffic (`tutti experts stats HOST:PORT --json`) on rank OFFLOAD_RANK,
# under the same `tutti bench serve` load. Prints TTFT and TPOT of both and
# the offload figures of the second server's /metrics (offloaded experts,
# share of rows that chose one, the wait on them). The load average is
# recorded with each run. Tokens are the same in both (greedy requests:
# the test suite checks them bit for bit, tests/serve/test_serve_offload.cpp).
#
# Usage: bench/bench_serve_offload.sh [BUILD_DIR]
#   (REQUESTS=48 CONCURRENCY=8 PROMPT=64 OUTPUT=64 EP=4 OFFLOAD_RANK=3
#    THRESHOLD=0.1 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
requests=${REQUESTS:-48} concurrency=${CONCURRENCY:-8}
prompt=${PROMPT:-64} output=${OUTPUT:-64} ep=${EP:-4}
offload_rank=${OFFLOAD_RANK:-3} threshold=${THRESHOLD:-0.1}
tutti=$build/apps/tutti
[ -x "$tutti" ] || { echo "bench_serve_offload: $tutti not built" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_serve_offload.XXXXXX)
server=
stop_server() {
  [ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  server=
}
trap 'stop_server; rm -rf "$scratch"' EXIT

"$tutti" export --init configs/medium.yaml --format hf --out "$scratch/hf" >/dev/null

# start NAME EXTRA_YAML: a server on a free port; sets url.
start() {
  printf 'serve:\n  model: %s\n  model_name: medium\n  ep_size: %s\n  max_sequences: 32\n%s' \
    "$scratch/hf" "$ep" "$2" >"$scratch/$1.yaml"
  "$tutti" serve "$scratch/$1.yaml" --listen 127.0.0.1:0 >"$scratch/$1.log" 2>&1 &
  server=$!
  url=
  for _ in $(seq 1 300); do
    url=$(grep -o 'on http://[0-9.:]*' "$scratch/$1.log" | head -1 | cut -c4-) || true
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "bench_serve_offload: $1 did not start" >&2; cat "$scratch/$1.log" >&2; exit 1; }
}

# load NAME: the bench load against url, one JSON line in results.
results=$scratch/results.jsonl
load() {
  local l; l=$(cut -d' ' -f1 /proc/loadavg)
  "$tutti" bench serve --url "$url" --model medium --requests "$requests" \
    --concurrency "$concurrency" --prompt-tokens "$prompt" \
    --output-tokens "$output" --seed 3 --no-progress --json "$scratch/$1.json" >/dev/null
  python3 - "$scratch/$1.json" "$1" "$l" >>"$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r = r[0] if isinstance(r, list) else r
print(json.dumps({"placement": sys.argv[2], "load": float(sys.argv[3]),
    "completed": r["completed"], "failed": r["failed"],
    "ttft_p50": r["ttft_ms"]["p50"], "ttft_p99": r["ttft_ms"]["p99"],
    "tpot_p50": r["tpot_ms"]["p50"], "tpot_p99": r["tpot_ms"]["p99"],
    "tok_s": r["output_token_throughput"]}))
PY
}

start contiguous ""
load contiguous
"$tutti" experts stats "${url#http://}" --json "$scratch/stats.json" >"$scratch/stats.txt"
stop_server

start offload "  offload: {stats: $scratch/stats.json, threshold: $threshold, rank: $offload_rank}
"
load offload
curl -s "$url/metrics" | grep -E '^tutti_serve_(offload|offloaded|routed)' >"$scratch/offload.prom" || true
stop_server

echo "bench_serve_offload: medium model, $ep EP ranks in one process, $requests requests" \
  "at concurrency $concurrency, $prompt prompt + $output output tokens; offload:" \
  "experts under $threshold of their layer's tokens on rank $offload_rank"
grep -m1 'offloaded to rank' "$scratch/offload.log" || true
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'placement':<11} {'load':>5} {'done':>5} {'fail':>4} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'tok/s':>8}")
for r in rows:
    print(f"{r['placement']:<11} {r['load']:>5.2f} {r['completed']:>5} {r['failed']:>4} "
          f"{r['ttft_p50']:>9.1f} {r['ttft_p99']:>9.1f} {r['tpot_p50']:>9.2f} {r['tpot_p99']:>9.2f} {r['tok_s']:>8.1f}")
PY
echo "offload server's /metrics:"
grep -vE '_bucket' "$scratch/offload.prom" || true
