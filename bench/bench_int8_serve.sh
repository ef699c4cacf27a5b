#!/usr/bin/env bash
# 8-bit expert weights in serving, in one run on one core:
#
# 1. Speed. The randomly initialised medium model (configs/medium.yaml:
#    vocab 256, D256, F512, 4 layers, 8 experts top-2) exported three ways:
#    Hugging Face float32, Hugging Face with the experts int8
#    (`tutti export --dtype int8`), and GGUF with the same tensors in Q8_0
#    (`--format gguf --dtype q8_0`; embeddings, attention, norms, router
#    and output stay F32 on both sides). `tutti serve` of the int8 and of
#    the float32 export (one engine, pinned to core 0) and llama.cpp
#    (node-llama-cpp's prebuilt CPU build, bench/peer/bench_llama.mjs, one
#    thread, core 0, F32 KV cache) run the same workload at concurrency 1,
#    and the int8 export once more with serve.activation_dtype int8 (the
#    rows quantized per row as well, as llama.cpp's Q8_0 product quantizes
#    its rows per block of 32):
#    REQUESTS requests of PROMPT random token ids, OUTPUT greedy tokens
#    each. Decode tokens/s is 1000 / the mean time per output token,
#    prefill tokens/s PROMPT / the mean time to first token. Interleaved
#    ROUNDS times; medians over rounds. Then the engine's decode alone, no
#    HTTP (bench_serve decode 1 [int8|w8a8], when built).
# 2. Agreement on real text. A model trained on real text (configs/text.yaml,
#    1,000 steps on the Python documentation; TEXT_RUN, or trained here
#    first in about 6 minutes) served float32, with serve.weight_dtype
#    int8 (quantized at load: the same bits as its --dtype int8 export),
#    and with int8 rows too;
#    PROMPTS greedy completions of MAX_TOKENS tokens from lines of the
#    library pages: the share of positions whose tokens agree, and the
#    chosen tokens' log-probability drift up to each completion's first
#    different token (mean and largest).
#
# Needs deploy/install-deps.sh --bench (node-llama-cpp in bench/peer) and
# Debian's python3-doc (the text).
# Usage: bench/bench_int8_serve.sh [BUILD_DIR]
#   env: ROUNDS=3 REQUESTS=8 PROMPT=128 OUTPUT=64 PROMPTS=16 MAX_TOKENS=64
#        TEXT_RUN (a configs/text.yaml run directory) TEXT_TOKENIZER (its
#        tokenizer; default TEXT_RUN/../tok)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
rounds=${ROUNDS:-3} requests=${REQUESTS:-8} prompt=${PROMPT:-128}
output=${OUTPUT:-64} prompts=${PROMPTS:-16} max_tokens=${MAX_TOKENS:-64}
tutti=$build/apps/tutti
docs=/usr/share/doc/python3.11/html/_sources
[ -x "$tutti" ] || { echo "bench_int8_serve: $tutti not built" >&2; exit 1; }
[ -d bench/peer/node_modules/node-llama-cpp ] \
  || { echo "bench_int8_serve: node-llama-cpp missing (deploy/install-deps.sh --bench)" >&2; exit 1; }
[ -d "$docs" ] || { echo "bench_int8_serve: $docs missing (python3-doc)" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_int8_serve.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

# Starts `tutti serve CONFIG` on core 0; sets $url once it listens.
serve() {
  local config=$1
  taskset -c 0 "$tutti" serve "$config" --listen 127.0.0.1:0 >"$config.log" 2>&1 &
  servers+=($!)
  url=""
  for _ in $(seq 1 600); do
    url=$(grep -so 'on http://[0-9.:]*' "$config.log" | head -1 | cut -c4-) || true
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  echo "bench_int8_serve: tutti serve $config did not start" >&2
  cat "$config.log" >&2
  exit 1
}

# 1. Speed.
"$tutti" export --init configs/medium.yaml --format hf --out "$scratch/fp32" >/dev/null
"$tutti" export --init configs/medium.yaml --format hf --dtype int8 --out "$scratch/int8" >/dev/null
"$tutti" export --init configs/medium.yaml --format gguf --dtype q8_0 --out "$scratch/q8" >/dev/null
declare -A url_of
for dtype in fp32 int8 int8rows; do
  sed "s#runs/medium/export#$scratch/${dtype%rows}#" configs/serve-medium.yaml \
    >"$scratch/serve-$dtype.yaml"
  [ "$dtype" = int8rows ] && printf '    activation_dtype: int8\n' >>"$scratch/serve-$dtype.yaml"
  serve "$scratch/serve-$dtype.yaml"
  url_of[$dtype]=$url
done
kernel=$(grep -m1 '^serve: experts int8' "$scratch/serve-int8.yaml.log" | cut -c8-)
kernel_rows=$(grep -m1 '^serve: experts int8' "$scratch/serve-int8rows.yaml.log" | cut -c8-)

results=$scratch/results.jsonl
load() { cut -d' ' -f1 /proc/loadavg; }
for round in $(seq 1 "$rounds"); do
  l=$(load)
  (cd bench/peer && taskset -c 0 node bench_llama.mjs --gguf "$scratch/q8/model-q8_0.gguf" \
     --threads 1 --concurrency 1 --requests "$requests" --prompt-tokens "$prompt" \
     --output-tokens "$output" --seed "$round") \
    | sed "s/^{/{\"round\":$round,\"load\":$l,\"side\":\"llama.cpp Q8_0\",/" >>"$results"
  for dtype in int8rows int8 fp32; do
    l=$(load)
    "$tutti" bench serve --url "${url_of[$dtype]}" --concurrency 1 \
      --requests "$requests" --prompt-tokens "$prompt" --output-tokens "$output" \
      --seed "$round" --no-progress --json "$scratch/tutti.json" >/dev/null
    python3 - "$scratch/tutti.json" "$round" "$l" "tutti ${dtype/rows/ rows}" >>"$results" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(json.dumps({"round": int(sys.argv[2]), "load": float(sys.argv[3]),
        "side": sys.argv[4], "output_tokens_per_s": r["output_token_throughput"],
        "ttft_ms_mean": r["ttft_ms"]["mean"], "tpot_ms_mean": r["tpot_ms"]["mean"]}))
PY
  done
done
for pid in "${servers[@]}"; do kill "$pid"; wait "$pid" 2>/dev/null || true; done
servers=()
# The engine alone, the same model's shape on the same core, no HTTP
# (bench_serve decode 1 [int8]): what the serving loop adds to a token.
engine=""
if [ -x "$build/bench/bench_serve" ]; then
  for dtype in w8a8 int8 fp32; do
    runs=$(for _ in 1 2 3; do
      taskset -c 0 "$build/bench/bench_serve" decode 1 "$dtype" | grep -o '[0-9.]* tok/s' | cut -d' ' -f1
    done | sort -n | sed -n 2p)
    engine="$engine, $dtype $runs tok/s"
  done
fi

# 2. Agreement on real text.
if [ -z "${TEXT_RUN:-}" ]; then
  TEXT_RUN=$scratch/text/run
  "$tutti" data tokenizer train --input "$docs" --vocab 4096 --out "$scratch/text/tok" >/dev/null
  "$tutti" data prepare --input "$docs" --tokenizer "$scratch/text/tok" \
    --out "$scratch/text/data" >/dev/null
  sed -e "s|^  dir: runs/text/data$|  dir: $scratch/text/data|" \
      -e "s|^  dir: runs/text$|  dir: $TEXT_RUN|" configs/text.yaml >"$scratch/text.yaml"
  "$tutti" run "$scratch/text.yaml" --quiet >"$scratch/text.log" 2>&1
fi
tokenizer=${TEXT_TOKENIZER:-$TEXT_RUN/../tok}
checkpoint=$(ls -d "$TEXT_RUN"/checkpoints/step-* | sort | tail -1)
"$tutti" export "$checkpoint" --format hf --tokenizer "$tokenizer" --out "$scratch/text-hf" >/dev/null
declare -A text_url
for dtype in fp32 int8 int8rows; do
  printf 'serve:\n  model: %s\n  weight_dtype: %s\n  log_dir: %s\n' \
    "$scratch/text-hf" "${dtype%rows}" "$scratch" >"$scratch/text-$dtype.yaml"
  [ "$dtype" = int8rows ] && printf '  activation_dtype: int8\n' >>"$scratch/text-$dtype.yaml"
  serve "$scratch/text-$dtype.yaml"
  text_url[$dtype]=$url
done
agree() {
python3 - "${text_url[fp32]}" "${text_url[$1]}" "$docs" "$prompts" "$max_tokens" <<'PY'
import glob, json, random, sys, urllib.request
fp32, int8, docs, n, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
pages = sorted(glob.glob(docs + "/library/*.rst.txt"))
random.seed(3)
prompts = []
for page in random.sample(pages, n):
    lines = [l.strip() for l in open(page, errors="replace") if len(l.strip()) > 60]
    if lines:
        prompts.append(lines[len(lines) // 2][:60])
def complete(url, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "logprobs": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    c = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]
    return c["token_ids"], c["logprobs"]["token_logprobs"]
same = total = 0
drift = []
for p in prompts:
    (t0, l0), (t1, l1) = complete(fp32, p), complete(int8, p)
    agreed = True
    for a, b, la, lb in zip(t0, t1, l0, l1):
        total += 1
        same += a == b
        if agreed:
            drift.append(abs(la - lb))
        agreed = agreed and a == b
print(f"{same} of {total} positions agree ({100 * same / total:.1f}%); chosen tokens' "
      f"log-probability drift up to the first different token: mean {sum(drift) / len(drift):.4f}, "
      f"largest {max(drift):.4f} ({len(drift)} positions)")
PY
}
agreement=$(agree int8)
agreement_rows=$(agree int8rows)

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]] && echo "$1" || echo "no $1"; }
echo "bench_int8_serve $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "($(has avx512_bf16), $(has amx_tile), $(has avx512_vnni)), one core"
echo "tutti: $kernel"
echo "tutti, rows int8: $kernel_rows"
echo "medium model, concurrency 1, prompt $prompt, output $output, $requests requests, medians of $rounds rounds"
python3 - "$results" "$prompt" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
prompt = int(sys.argv[2])
print(f"load average (1 min) during the runs: {min(r['load'] for r in rows):.1f} - {max(r['load'] for r in rows):.1f}")
print("| side | decode tok/s (1000 / TPOT) | prefill tok/s (prompt / TTFT) | output tok/s | TPOT ms | TTFT ms |")
print("|---|---:|---:|---:|---:|---:|")
med = {}
for side in ("tutti int8 rows", "tutti int8", "tutti fp32", "llama.cpp Q8_0"):
    pick = lambda key: statistics.median([r[key] for r in rows if r["side"] == side])
    tpot, ttft = pick("tpot_ms_mean"), pick("ttft_ms_mean")
    med[side] = (1000 / tpot, prompt * 1000 / ttft)
    print(f"| {side} | {1000 / tpot:.0f} | {prompt * 1000 / ttft:.0f} | "
          f"{pick('output_tokens_per_s'):.1f} | {tpot:.2f} | {ttft:.1f} |")
d, p = (med["tutti int8"][i] / med["llama.cpp Q8_0"][i] for i in (0, 1))
print(f"tutti int8 / llama.cpp Q8_0: decode {d:.2f}x, prefill {p:.2f}x")
d, p = (med["tutti int8 rows"][i] / med["llama.cpp Q8_0"][i] for i in (0, 1))
print(f"tutti int8 rows / llama.cpp Q8_0: decode {d:.2f}x, prefill {p:.2f}x")
PY
[ -z "$engine" ] || echo "decode in the engine alone (bench_serve, median of 3)${engine#,}"
echo "real text (configs/text.yaml model, $prompts greedy completions of $max_tokens tokens), int8 against fp32: $agreement"
echo "the same, int8 experts times int8 rows against fp32: $agreement_rows"
