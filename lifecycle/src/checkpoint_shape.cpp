#include "tutti/lifecycle/checkpoint_shape.hpp"

#include <utility>
#include <vector>

#include "tutti/model/model_shape.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::lifecycle {

status check_checkpoint_shape(const std::filesystem::path& checkpoint_dir,
                              const job_config& cfg) {
  auto shard = store::read_shard_file(
    checkpoint_dir / store::shard_file_name(0), /*load_data=*/false);
  if (!shard)
    return shard.error();
  const auto& m = cfg.model;
  // Header field, config key, the config's value.
  const std::vector<std::pair<std::pair<const char*, const char*>, int64_t>>
    fields = {
      {{"vocab_size", "model.vocab_size"}, m.vocab_size},
      {{"hidden_size", "model.hidden_size"}, m.hidden_size},
      {{"intermediate_size", "model.intermediate_size"}, m.intermediate_size},
      {{"num_hidden_layers", "model.num_hidden_layers"}, m.num_hidden_layers},
      {{"num_attention_heads", "model.num_attention_heads"},
       m.num_attention_heads},
      {{"num_key_value_heads", "model.num_key_value_heads"},
       m.num_key_value_heads},
      {{"head_dim", "model.head_dim"}, m.head_dim()},
      {{"q_lora_rank", "model.q_lora_rank"}, m.q_lora_rank},
      {{"kv_lora_rank", "model.kv_lora_rank"}, m.kv_lora_rank},
      {{"qk_nope_head_dim", "model.qk_nope_head_dim"}, m.qk_nope_head_dim},
      {{"qk_rope_head_dim", "model.qk_rope_head_dim"}, m.qk_rope_head_dim},
      {{"v_head_dim", "model.v_head_dim"}, m.v_head_dim},
      {{"rope_interleave", "model.rope_interleave"}, m.rope_interleave ? 1 : 0},
      {{"num_experts", "moe_config.num_experts"}, cfg.moe.num_experts},
      {{"world_size", "cluster_config.world_size"}, cfg.cluster.world_size},
      {{"ep_size", "cluster_config.ep_size"}, cfg.ep_size()}};
  TUTTI_RETURN_IF_ERROR(
    model::check_family(shard->meta, m.family, checkpoint_dir.string()));
  const auto& ints = shard->meta.ints;
  for (const auto& [names, want] : fields) {
    auto it = ints.find(names.first);
    if (it == ints.end())
      continue; // written before the field was recorded
    if (it->second != want)
      return status::error(std::string(names.second) + ": the checkpoint in "
                           + checkpoint_dir.string() + " has "
                           + std::to_string(it->second) + ", the config "
                           + std::to_string(want));
  }
  return {};
}

} // namespace tutti::lifecycle
