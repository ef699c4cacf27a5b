#pragma once
// Model presets for `tutti plan`: a config may name its model (`model:
// mixtral-8x7b`) instead of spelling out the section, or the command line
// may (`--model`). For planning only: a job still needs its model section.

#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti {

// The preset names, in the order the refusal lists them.
std::vector<std::string> model_preset_names();

// Reads a config for planning. `preset` (from --model; empty for none)
// fills the model section, as does `model: NAME` in the file; the preset's
// expert count and top-k fill moe_config's where the file leaves them out.
// A config without train, data or run sections (a cluster example pasted
// as is) is planned with one sequence of model.max_seq_len (at most 4096)
// per data-parallel rank, and without cluster_config.device_memory_gb for
// 80 GB devices; `notes` says what was filled in. With `any_layout` (for
// --search, which chooses the layout) a config refused for its layout keys
// (parallel sizes, pipeline layers, micro-batches, recomputation,
// optimizer sharding) is read without them, and a note says why. A config
// with no model section and no preset is refused with one line naming the
// presets.
expected<job_config> parse_plan_config(const std::string& yaml_text,
                                       const std::string& source_name,
                                       const std::string& preset,
                                       std::vector<std::string>& notes,
                                       bool any_layout = false);

} // namespace tutti
