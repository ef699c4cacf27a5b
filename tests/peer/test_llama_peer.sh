#!/usr/bin/env bash
# llama.cpp loads tutti's GGUF export of the medium model (F32 and F16), and
# of the same model as a Qwen3-MoE (its qwen3moe architecture: QK-norm,
# heads of their own size), and its greedy continuations and
# log-probabilities equal `tutti serve`'s on the Hugging Face export of the
# same weights; the experts in 8 bits, Q8_0 in llama.cpp and `tutti export
# --dtype int8` in tutti, give the same tokens within a stated
# log-probability tolerance. Exits 77 (CTest: skipped) where
# node or node-llama-cpp (deploy/install-deps.sh --bench) is missing.
set -euo pipefail
src=${TUTTI_SOURCE_DIR:?} bin=${TUTTI_BINARY_DIR:?}
peer=$src/bench/peer
source "$src/tests/support/serve_script_support.sh"
require_node_package test_llama_peer "$peer" node-llama-cpp "deploy/install-deps.sh --bench"
make_scratch tutti_llama_peer
tutti=$bin/apps/tutti
for format in "gguf --dtype f32" "gguf --dtype f16" "gguf --dtype q8_0" "hf" \
  "hf --dtype int8"; do
  dir=$work/${format##* }
  [ "$format" != "hf --dtype int8" ] || dir=$work/hf-int8
  timeout 120 "$tutti" export --init "$src/configs/medium.yaml" --format $format --out "$dir"
done
sed "s#runs/medium/export#$work/hf#" "$src/configs/serve-medium.yaml" >"$work/serve.yaml"
start_serve "$work/serve.yaml" 300
cd "$peer"
# F32 weights: the same sums in a different order (fp32 rounding only).
timeout 120 node compare_llama.mjs --gguf "$work/f32/model-f32.gguf" --url "$url" --tolerance 1e-5
# F16 weights in llama.cpp against F32 in tutti: the rounding of the weights.
timeout 120 node compare_llama.mjs --gguf "$work/f16/model-f16.gguf" --url "$url" --tolerance 3e-3
# The experts in 8 bits on both sides: Q8_0 (a scale per 32 values) in
# llama.cpp, int8 with a scale per output channel in tutti; both round the
# same float weights to 8 bits, differently, so the log-probabilities differ
# by about that rounding (4.4e-2 measured on these prompts).
kill "$server"; wait "$server" 2>/dev/null || true
sed "s#runs/medium/export#$work/hf-int8#" "$src/configs/serve-medium.yaml" >"$work/serve-int8.yaml"
start_serve "$work/serve-int8.yaml" 300
grep -q "experts int8 (from the checkpoint)" "$work/serve.log"
timeout 120 node compare_llama.mjs --gguf "$work/q8_0/model-q8_0.gguf" --url "$url" --tolerance 0.1
# The same model as a Qwen3-MoE, F32: llama.cpp's qwen3moe against tutti.
kill "$server"; wait "$server" 2>/dev/null || true
sed 's/^model:$/model:\n  family: qwen3_moe\n  head_dim: 48/' \
  "$src/configs/medium.yaml" >"$work/qwen3.yaml"
for format in "gguf --dtype f32" "hf"; do
  timeout 120 "$tutti" export --init "$work/qwen3.yaml" --format $format \
    --out "$work/qwen3-${format##* }"
done
sed "s#runs/medium/export#$work/qwen3-hf#" "$src/configs/serve-medium.yaml" \
  >"$work/serve-qwen3.yaml"
start_serve "$work/serve-qwen3.yaml" 300
cd "$peer"
timeout 120 node compare_llama.mjs --gguf "$work/qwen3-f32/model-f32.gguf" --url "$url" --tolerance 1e-5
