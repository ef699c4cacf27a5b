#pragma once
// `tutti export --format gguf`: a model as llama.cpp loads it (GGUF; a
// Mixtral in its "llama" architecture, a Qwen3-MoE in "qwen3moe"):
// llama.cpp's tensor names, the experts of a layer stacked into one tensor
// each, and for "llama" the rows of Q and K reordered from Hugging Face's
// rotate_half layout to the interleaved pairs llama.cpp's rotary embedding
// expects there (as its convert_hf_to_gguf.py does; "qwen3moe" rotates as
// Hugging Face does). Byte-level vocabulary: token t < 256 is the byte
// token <0xTT>.

#include <filesystem>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::cli {

// How the weights are stored: f32; f16 (every matrix); q8_0 (the experts'
// matrices in llama.cpp's Q8_0, the tensors `tutti export --dtype int8`
// and serve.weight_dtype int8 hold in 8 bits; the rest F32).
enum class gguf_dtype { f32, f16, q8_0 };

// `tensors` by Hugging Face name (one per expert), `meta` as a rank-0
// shard records the model. `dropped_biases`: set when non-zero router
// selection biases had to be left out (llama.cpp's llama and qwen3moe
// have none).
status export_gguf(const std::vector<store::named_tensor>& tensors,
                   const store::shard_meta& meta,
                   const std::filesystem::path& file, gguf_dtype dtype,
                   bool& dropped_biases);

// Hugging Face row order of a [heads * head_dim, in] projection to
// llama.cpp's: within each head, row (half a, index j) moves to 2 j + a.
std::vector<float> rope_rows_for_gguf(const std::vector<float>& w,
                                      int64_t heads, int64_t head_dim,
                                      int64_t in);

} // namespace tutti::cli
