#!/usr/bin/env bash
# llama.cpp loads tutti's GGUF export of the medium model (F32 and F16) and
# its greedy continuations and log-probabilities equal `tutti serve`'s on the
# Hugging Face export of the same weights. Exits 77 (CTest: skipped) where
# node or node-llama-cpp (deploy/install-deps.sh --bench) is missing.
set -euo pipefail
src=${TUTTI_SOURCE_DIR:?} bin=${TUTTI_BINARY_DIR:?}
peer=$src/bench/peer
if ! command -v node >/dev/null; then
  echo "SKIPPED test_llama_peer: node is not installed"; exit 77
fi
if [ ! -d "$peer/node_modules/node-llama-cpp" ]; then
  echo "SKIPPED test_llama_peer: node-llama-cpp is not installed (deploy/install-deps.sh --bench)"; exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tutti_llama_peer.XXXXXX")
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  [ -z "$server" ] || wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
tutti=$bin/apps/tutti
for format in "gguf --dtype f32" "gguf --dtype f16" "hf"; do
  dir=$work/${format##* }
  timeout 120 "$tutti" export --init "$src/configs/medium.yaml" --format $format --out "$dir"
done
sed "s#runs/medium/export#$work/hf#" "$src/configs/serve-medium.yaml" >"$work/serve.yaml"
timeout 300 "$tutti" serve "$work/serve.yaml" --listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
server=$!
url=""
for _ in $(seq 1 300); do
  url=$(grep -o 'on http://[0-9.:]*' "$work/serve.log" | head -1 | cut -c4-) || true
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "tutti serve did not start"; cat "$work/serve.log"; exit 1; }
cd "$peer"
# F32 weights: the same sums in a different order (fp32 rounding only).
timeout 120 node compare_llama.mjs --gguf "$work/f32/model-f32.gguf" --url "$url" --tolerance 1e-5
# F16 weights in llama.cpp against F32 in tutti: the rounding of the weights.
timeout 120 node compare_llama.mjs --gguf "$work/f16/model-f16.gguf" --url "$url" --tolerance 3e-3
