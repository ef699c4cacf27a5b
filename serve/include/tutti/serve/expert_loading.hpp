#pragma once
// A daemon of a replica across daemons holds the dense weights and only
// the experts the replica's layout puts on its ranks: the layout is known
// before anything loads (serve_layout.hpp), the other experts' bytes are
// never read (safetensors by offset; a checkpoint shard by shard), so a
// model larger than one daemon is served by several. When a new layout
// (serve.replan) moves an expert onto a daemon, that daemon reads its
// weights from the model's directory before the layout is adopted,
// counting the bytes (tutti_serve_expert_loaded_bytes_total, and a log
// line). The weights are the same bits whoever loads them, so the tokens
// are those of one process holding every expert.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/expert_layout.hpp"
#include "tutti/serve/model.hpp"

namespace tutti::serve {

// Experts by [layer * experts + e]: 1 where held.
using expert_set = std::vector<char>;

// The experts `x` puts on any of `ranks`.
expert_set experts_on(const expert_layout& x,
                      const std::vector<int64_t>& ranks);

// load_model holding only the experts in `held` (sized layers * experts)
// and the dense weights; the others' packed matrices stay empty. With
// `weights` int8 float experts are quantized as each is read, to the
// codes and scales quantize_experts gives. Float experts keep no
// row-major copy (only the packed one serves). Errors as load_model's.
expected<served_model> load_model_part(const std::filesystem::path& dir,
                                       const expert_set& held,
                                       weight_dtype weights);

// Loads, into a model load_model_part built, the experts a new layout
// puts on this daemon's ranks that it does not hold yet.
class expert_loader {
public:
  // `m` outlives the loader; `dir` is where it was loaded from.
  expert_loader(served_model& m, std::filesystem::path dir)
    : model_(&m), dir_(std::move(dir)) {}

  // The experts `x` puts on group rank `rank` that the model lacks, read
  // and packed; the bytes they take (0: none was missing). Call between
  // steps: no shard reads an expert the current layout does not give it.
  expected<int64_t> hold_rank(const expert_layout& x, int64_t rank);

  int64_t loaded_bytes() const { return loaded_bytes_; }
  int64_t loaded_experts() const { return loaded_experts_; }

private:
  served_model* model_;
  std::filesystem::path dir_;
  std::mutex mutex_;
  std::atomic<int64_t> loaded_bytes_{0}, loaded_experts_{0};
};

} // namespace tutti::serve
