#!/usr/bin/env bash
# llama.cpp loads tutti's GGUF export of the medium model (F32 and F16) and
# its greedy continuations and log-probabilities equal `tutti serve`'s on the
# Hugging Face export of the same weights. Exits 77 (CTest: skipped) where
# node or node-llama-cpp (deploy/install-deps.sh --bench) is missing.
set -euo pipefail
src=${TUTTI_SOURCE_DIR:?} bin=${TUTTI_BINARY_DIR:?}
peer=$src/bench/peer
source "$src/tests/support/serve_script_support.sh"
require_node_package test_llama_peer "$peer" node-llama-cpp "deploy/install-deps.sh --bench"
make_scratch tutti_llama_peer
tutti=$bin/apps/tutti
for format in "gguf --dtype f32" "gguf --dtype f16" "hf"; do
  dir=$work/${format##* }
  timeout 120 "$tutti" export --init "$src/configs/medium.yaml" --format $format --out "$dir"
done
sed "s#runs/medium/export#$work/hf#" "$src/configs/serve-medium.yaml" >"$work/serve.yaml"
start_serve "$work/serve.yaml" 300
cd "$peer"
# F32 weights: the same sums in a different order (fp32 rounding only).
timeout 120 node compare_llama.mjs --gguf "$work/f32/model-f32.gguf" --url "$url" --tolerance 1e-5
# F16 weights in llama.cpp against F32 in tutti: the rounding of the weights.
timeout 120 node compare_llama.mjs --gguf "$work/f16/model-f16.gguf" --url "$url" --tolerance 3e-3
