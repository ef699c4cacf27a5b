#!/usr/bin/env bash
# Sequence capacity at equal KV-cache memory: multi-head latent attention
# against grouped-query attention.
#
# Two models of the same width, depth, vocabulary and context (hidden 256,
# 4 layers, vocab 256, 512 positions), randomly initialised and exported:
#   MLA: configs/medium-deepseek.yaml, a position costs its key/value latent
#        and rotated key per layer, (kv_lora_rank + qk_rope_head_dim) x
#        layers x 4 bytes = (64 + 16) x 4 x 4 = 1,280 bytes;
#   GQA: configs/medium-qwen3.yaml, keys and values of 4 KV heads of 32 per
#        layer, 2 x kv_heads x head_dim x layers x 4 = 2 x 4 x 32 x 4 x 4 =
#        4,096 bytes.
# (They differ elsewhere too: DeepSeek-V3's first layer is dense, it has a
# shared expert and the grouped sigmoid router; Qwen3-MoE has QK-norm and
# the softmax router. None of that touches the KV cache.)
#
# Each is served by `tutti serve` with the same serve.kv_cache_bytes
# (KV_BYTES) in blocks of 16 positions, max_sequences and a step budget
# high enough that only the cache limits how many requests run. From
# /metrics: tutti_serve_kv_cache_bytes_per_token and tutti_serve_kv_cache_blocks
# (the capacity); from `tutti plan --json` its KV bytes per sequence at
# model.max_seq_len. Then `tutti bench serve` sends REQUESTS requests of
# PROMPT random token ids and OUTPUT greedy tokens, CONCURRENCY at a time,
# while /metrics is polled every 50 ms: the most requests running at once
# (tutti_serve_requests_running) and the most KV blocks held. PROMPT +
# OUTPUT - 1 positions fit in the blocks a prompt takes (122 + 6 - 1 in 8
# blocks), so a request never grows into another block and never preempts:
# the peak is floor(blocks / 8) when the queue stays full. Short enough
# for a shared 2-core machine; the ratio does not depend on the length
# beyond the rounding to blocks.
#
# Usage: bench/bench_kv_capacity.sh [BUILD_DIR]
#   env: KV_BYTES=8MiB PROMPT=122 OUTPUT=6 CONCURRENCY=64 REQUESTS=128
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
kv_bytes=${KV_BYTES:-8MiB} prompt=${PROMPT:-122} output=${OUTPUT:-6}
concurrency=${CONCURRENCY:-64} requests=${REQUESTS:-128}
tutti=$build/apps/tutti
[ -x "$tutti" ] || { echo "bench_kv_capacity: $tutti not built" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_kv_capacity.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

# One sample of a gauge from $url/metrics (the first, any labels).
gauge() {
  curl -s "$url/metrics" \
    | awk -v n="$1" '!found && ($1 == n || index($1, n "{") == 1) {print $2; found = 1}' \
    || true
}

echo "# bench_kv_capacity: serve.kv_cache_bytes $kv_bytes, prompt $prompt," \
  "output $output, concurrency $concurrency, $requests requests," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| attention | config | bytes/position (/metrics) | plan: KV bytes/sequence at max_seq_len | blocks x 16 positions | sequences of %d expected | most running at once | most blocks held | preempted | completed | wall s |\n' \
  $((prompt + output - 1))
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
declare -A peak_of
for pair in MLA:configs/medium-deepseek.yaml GQA:configs/medium-qwen3.yaml; do
  kind=${pair%%:*} config=${pair#*:}
  "$tutti" export --init "$config" --format hf --out "$scratch/$kind" >/dev/null
  plan=$("$tutti" plan "$config" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["memory"]["kv_cache_per_sequence"])')
  cat >"$scratch/$kind.yaml" <<EOF
serve:
  model: $scratch/$kind
  listen: 127.0.0.1:0
  max_sequences: 256
  max_batch_tokens: 65536
  max_queue: 512
  kv_cache_bytes: $kv_bytes
  kv_block_tokens: 16
  request_timeout_s: 600
  step_timeout_s: 300
EOF
  "$tutti" serve "$scratch/$kind.yaml" >"$scratch/$kind.log" 2>&1 &
  servers+=($!)
  url=""
  for _ in $(seq 1 600); do
    url=$(grep -so 'on http://[0-9.:]*' "$scratch/$kind.log" | head -1 | cut -c4-) || true
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "bench_kv_capacity: $kind did not start" >&2; cat "$scratch/$kind.log" >&2; exit 1; }
  per_token=$(gauge tutti_serve_kv_cache_bytes_per_token)
  blocks=$(gauge tutti_serve_kv_cache_blocks)
  per_sequence=$(( (prompt + output - 1 + 15) / 16 ))
  expected=$(( ${blocks%.*} / per_sequence ))

  start=$(date +%s.%N)
  timeout 900 "$tutti" bench serve --url "$url" --concurrency "$concurrency" \
    --requests "$requests" --prompt-tokens "$prompt" --output-tokens "$output" \
    --no-progress --json "$scratch/$kind.json" >"$scratch/$kind.bench" 2>&1 &
  bench=$!
  running=0 held=0
  while kill -0 "$bench" 2>/dev/null; do
    r=$(gauge tutti_serve_requests_running) b=$(gauge tutti_serve_kv_cache_blocks_used)
    running=$(awk -v a="$running" -v b="${r:-0}" 'BEGIN {print (b > a) ? b : a}')
    held=$(awk -v a="$held" -v b="${b:-0}" 'BEGIN {print (b > a) ? b : a}')
    sleep 0.05
  done
  wait "$bench" || { cat "$scratch/$kind.bench" >&2; exit 1; }
  wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
  preempted=$(gauge tutti_serve_preemptions_total)
  completed=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["completed"])' "$scratch/$kind.json")
  kill "${servers[-1]}"; wait "${servers[-1]}" 2>/dev/null || true
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s | %s |\n' \
    "$kind" "$config" "$per_token" "$plan" "$blocks" "$expected" "$running" \
    "$held" "${preempted:-0}" "$completed" "$requests" "$wall"
  peak_of[$kind]=$running
done
python3 - "${peak_of[MLA]}" "${peak_of[GQA]}" "$((prompt + output - 1))" <<'PY'
import sys
mla, gqa, length = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
formula = (2 * 4 * 32 * 4 * 4) / ((64 + 16) * 4 * 4)
print(f"sequences held at once: MLA {mla:.0f} ({mla * length:.0f} positions),"
      f" GQA {gqa:.0f} ({gqa * length:.0f} positions); ratio {mla / gqa:.2f};"
      f" formula 2 x kv_heads x head_dim x layers x 4 / ((kv_lora_rank +"
      f" qk_rope_head_dim) x layers x 4) = 4096 / 1280 = {formula:.2f}")
PY
