#!/usr/bin/env bash
# tutti serve against llama.cpp (node-llama-cpp's prebuilt CPU build) serving
# the same weights: the randomly initialised medium model (configs/medium.yaml:
# vocab 256, D256, F512, 4 layers, 8 experts top-2, 8/4 heads), exported once
# as Hugging Face safetensors for tutti and as GGUF F32 for llama.cpp
# (F32 KV cache, no flash attention: the same precision on both sides;
# tests/peer/test_llama_peer.sh shows the two give the same tokens and logits).
#
# The workload on both sides: REQUESTS requests of PROMPT random token ids,
# each generating OUTPUT tokens greedily, at most C in flight for each C in
# CONCURRENCY. tutti: `tutti serve` (1 thread: one engine; 2 threads: two
# expert-parallel rank actors) measured by `tutti bench serve` over HTTP.
# llama.cpp: bench/peer/bench_llama.mjs, in process (no HTTP), one sequence
# per request in flight, THREADS threads. Each server is pinned to the same
# cores (taskset: core 0, or cores 0-1). Interleaved, ROUNDS times: llama.cpp
# 1 thread, tutti 1 thread, llama.cpp 2 threads, tutti 2 threads; the load
# average is recorded before each. The table gives medians over rounds.
#
# MODEL picks another model config of the same serving shape, e.g.
# configs/medium-qwen3.yaml (Qwen3-MoE: fine-grained experts, QK-norm;
# llama.cpp's qwen3moe). Prefill tokens/s is PROMPT / the mean time to first
# token, decode tokens/s 1000 / the mean time per output token (a stream's).
#
# Needs deploy/install-deps.sh --bench (node-llama-cpp in bench/peer).
# Usage: bench/bench_vs_llama.sh [BUILD_DIR]
#   (ROUNDS=2 REQUESTS=32 PROMPT=128 OUTPUT=64 CONCURRENCY=1,8,32 THREADS="1 2"
#    MODEL=configs/medium.yaml by default)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=$(cd "${1:-build}" && pwd)
rounds=${ROUNDS:-2} requests=${REQUESTS:-32} prompt=${PROMPT:-128}
output=${OUTPUT:-64} concurrency=${CONCURRENCY:-1,8,32}
thread_counts=${THREADS:-1 2} model=${MODEL:-configs/medium.yaml}
tutti=$build/apps/tutti
[ -x "$tutti" ] || { echo "bench_vs_llama: $tutti not built" >&2; exit 1; }
[ -d bench/peer/node_modules/node-llama-cpp ] \
  || { echo "bench_vs_llama: node-llama-cpp missing (deploy/install-deps.sh --bench)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "bench_vs_llama: needs 2 cores" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_vs_llama.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

"$tutti" export --init "$model" --format hf --out "$scratch/hf" >/dev/null
"$tutti" export --init "$model" --format gguf --dtype f32 --out "$scratch/gguf" >/dev/null
gguf=$scratch/gguf/model-f32.gguf

# One server per thread count, started up front and idle while the other runs.
declare -A url
for threads in $thread_counts; do
  sed -e "s#runs/medium/export#$scratch/hf#" \
      -e "s#num_gpus_per_node: 1#num_gpus_per_node: $threads#" \
      configs/serve-medium.yaml >"$scratch/serve$threads.yaml"
  cores=$([ "$threads" = 1 ] && echo 0 || echo 0,1)
  taskset -c "$cores" "$tutti" serve "$scratch/serve$threads.yaml" --listen 127.0.0.1:0 \
    >"$scratch/serve$threads.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 1 300); do
    u=$(grep -o 'on http://[0-9.:]*' "$scratch/serve$threads.log" | head -1 | cut -c4-) || true
    [ -n "$u" ] && break
    sleep 0.1
  done
  [ -n "$u" ] || { echo "bench_vs_llama: tutti serve did not start" >&2; cat "$scratch/serve$threads.log" >&2; exit 1; }
  url[$threads]=$u
done

results=$scratch/results.jsonl
load() { cut -d' ' -f1 /proc/loadavg; }
for round in $(seq 1 "$rounds"); do
  for threads in $thread_counts; do
    cores=$([ "$threads" = 1 ] && echo 0 || echo 0,1)
    l=$(load)
    (cd bench/peer && taskset -c "$cores" node bench_llama.mjs --gguf "$gguf" \
       --threads "$threads" --concurrency "$concurrency" --requests "$requests" \
       --prompt-tokens "$prompt" --output-tokens "$output" --seed "$round") \
      | sed "s/^{/{\"round\":$round,\"load\":$l,/" >>"$results"
    l=$(load)
    "$tutti" bench serve --url "${url[$threads]}" --concurrency "$concurrency" \
      --requests "$requests" --prompt-tokens "$prompt" --output-tokens "$output" \
      --seed "$round" --no-progress --json "$scratch/tutti.json" >/dev/null
    python3 - "$scratch/tutti.json" "$round" "$l" "$threads" >>"$results" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(json.dumps({"round": int(sys.argv[2]), "load": float(sys.argv[3]),
        "peer": "tutti", "threads": int(sys.argv[4]), "concurrency": r["concurrency"],
        "output_tokens_per_s": r["output_token_throughput"],
        "ttft_ms_mean": r["ttft_ms"]["mean"], "ttft_ms_p99": r["ttft_ms"]["p99"],
        "tpot_ms_mean": r["tpot_ms"]["mean"], "tpot_ms_p99": r["tpot_ms"]["p99"]}))
PY
  done
done

echo "bench_vs_llama $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "$model, prompt $prompt, output $output, $requests requests per level, medians of $rounds rounds"
python3 - "$results" "$prompt" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
med = lambda xs: statistics.median(xs)
print(f"load average (1 min) during the runs: {min(r['load'] for r in rows):.1f} - {max(r['load'] for r in rows):.1f}")
prompt = int(sys.argv[2])
print("| threads | concurrency | tutti output tok/s | llama.cpp output tok/s | ratio | tutti TTFT mean / p99 (ms) | llama.cpp TTFT mean / p99 (ms) | tutti TPOT mean (ms) | llama.cpp TPOT mean (ms) | prefill tok/s tutti / llama.cpp | decode tok/s tutti / llama.cpp |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for threads in sorted({r["threads"] for r in rows}):
    for c in sorted({r["concurrency"] for r in rows}):
        pick = lambda peer, key: med([r[key] for r in rows if r["peer"] == peer
                                      and r["threads"] == threads and r["concurrency"] == c])
        t, l = pick("tutti", "output_tokens_per_s"), pick("llama.cpp", "output_tokens_per_s")
        print(f"| {threads} | {c} | {t:.1f} | {l:.1f} | {t / l:.2f} | "
              f"{pick('tutti', 'ttft_ms_mean'):.1f} / {pick('tutti', 'ttft_ms_p99'):.1f} | "
              f"{pick('llama.cpp', 'ttft_ms_mean'):.1f} / {pick('llama.cpp', 'ttft_ms_p99'):.1f} | "
              f"{pick('tutti', 'tpot_ms_mean'):.2f} | {pick('llama.cpp', 'tpot_ms_mean'):.2f} | "
              f"{prompt * 1000 / pick('tutti', 'ttft_ms_mean'):.0f} / {prompt * 1000 / pick('llama.cpp', 'ttft_ms_mean'):.0f} | "
              f"{1000 / pick('tutti', 'tpot_ms_mean'):.0f} / {1000 / pick('llama.cpp', 'tpot_ms_mean'):.0f} |")
PY
