#pragma once
// A model's weights in host memory under tutti's names (tensor_names.hpp,
// Hugging Face's MixtralForCausalLM's; a Qwen3-MoE directory's translated,
// family.hpp): every dense tensor, each layer's router biases as
// `...block_sparse_moe.gate.e_score_correction_bias`, and each expert's w1,
// w3 and w2 under its global index. The one loader of the project: a
// Hugging Face or `tutti export` directory (config.json and safetensors,
// one file or the shards of model.safetensors.index.json, F32/F16/BF16,
// I8 weights with their `_scale` tensors, kept as codes and scales, and
// FP8 e4m3 weights with their `_scale_inv` blocks as config.json's
// quantization_config gives them, dequantized to float32 as they load),
// or a tutti checkpoint (MANIFEST and shard files, verified before use;
// the optimizer's state stays behind). A directory's multi-token-prediction
// layers (DeepSeek-V3's num_nextn_predict_layers, numbered after the
// model's) are skipped, as vLLM skips them for the main model; any other
// tensor the model lacks is refused by its readers. Serving, `tutti sample` and
// `tutti export` read models through it.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::model {

struct model_weights {
  model_shape shape;
  // A checkpoint's in its shards' order, a directory's by file.
  std::vector<store::named_tensor> tensors;
  // A checkpoint's step and rank-0 header (from which an export writes
  // config.json); -1 and empty for a model directory.
  int64_t step = -1;
  store::shard_meta rank0;
  // A directory's multi-token-prediction tensors left unread
  // (model_shape::mtp_layers), for the reader to report.
  int64_t skipped_mtp_tensors = 0;
};

// The feed-forward tensors `s` has beyond the routed experts (each leading
// dense layer's MLP, each MoE layer's shared experts), under tutti's names:
// present and of their shape, else one line naming the tensor by the
// family's Hugging Face name. The loaders check them.
status check_feed_forward_tensors(
  const model_shape& s, const std::vector<store::named_tensor>& tensors);

// A directory with config.json or with a MANIFEST. Errors are one line
// naming the file, key or tensor.
expected<model_weights> load_weights(const std::filesystem::path& dir);

// load_weights one tensor at a time, for a reader that holds part of a
// model (a serving daemon, its own experts): every tensor name is checked
// as load_weights checks it, and only those `keep` takes (by tutti's name,
// and whether stored as int8; the model's shape known) are read and go to
// `sink` as they are. A directory's safetensors are read by offset, the
// others' bytes never; a checkpoint's shards one at a time (at most one
// shard's tensors beside what is kept). Returns the shape; counts the
// multi-token-prediction tensors it skipped into `skipped_mtp_tensors`
// where given.
using weight_filter = std::function<bool(const model_shape& shape,
                                         const std::string& name, bool int8)>;
expected<model_shape> stream_weights(const std::filesystem::path& dir,
                                     const weight_filter& keep,
                                     const store::tensor_sink& sink,
                                     int64_t* skipped_mtp_tensors = nullptr);

// A model directory's or checkpoint's shape, and whether its experts are
// stored int8, without reading the tensors' data.
struct weights_info {
  model_shape shape;
  bool int8_experts = false;
};
expected<weights_info> read_weights_info(const std::filesystem::path& dir);

// Either kind, by name.
expected<model_weights> read_hf_dir(const std::filesystem::path& dir);
expected<model_weights> read_checkpoint(const std::filesystem::path& dir);

// The newest committed checkpoint under run_dir/checkpoints (a step
// directory with its MANIFEST), or a failure saying there is none.
expected<std::filesystem::path> latest_checkpoint(
  const std::filesystem::path& run_dir);

} // namespace tutti::model
