#!/usr/bin/env bash
# llama.cpp loads tutti's GGUF export of the medium model (F32 and F16), and
# of the same model as a Qwen3-MoE (its qwen3moe architecture: QK-norm,
# heads of their own size) and as a DeepSeek-V3 (deepseek2: multi-head
# latent attention, a dense layer, a shared expert, the grouped sigmoid
# router), and its greedy continuations and
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
# The same width as a DeepSeek-V3, F32: llama.cpp's deepseek2 (absorbed
# multi-head latent attention over kv_b's two halves) against tutti.
kill "$server"; wait "$server" 2>/dev/null || true
sed -e 's/^model:$/model:\n  family: deepseek_v3\n  kv_lora_rank: 64\n  q_lora_rank: 96\n  qk_nope_head_dim: 32\n  qk_rope_head_dim: 16\n  v_head_dim: 32\n  rope_interleave: true\n  dense_intermediate_size: 512/' \
  -e 's/^  num_key_value_heads: 4$/  num_key_value_heads: 8/' \
  -e 's/^  router_top_k: 2$/  router_top_k: 2\n  n_shared_experts: 1\n  first_k_dense_replace: 1\n  scoring_func: sigmoid\n  n_group: 2\n  topk_group: 1\n  routed_scaling_factor: 2.5/' \
  "$src/configs/medium.yaml" >"$work/deepseek.yaml"
grep -q "family: deepseek_v3" "$work/deepseek.yaml"
for format in "gguf --dtype f32" "hf"; do
  timeout 120 "$tutti" export --init "$work/deepseek.yaml" --format $format \
    --out "$work/deepseek-${format##* }"
done
sed "s#runs/medium/export#$work/deepseek-hf#" "$src/configs/serve-medium.yaml" \
  >"$work/serve-deepseek.yaml"
start_serve "$work/serve-deepseek.yaml" 300
cd "$peer"
timeout 120 node compare_llama.mjs --gguf "$work/deepseek-f32/model-f32.gguf" --url "$url" --tolerance 1e-5
