// The canonical form of a job config: what every node must agree on.

#include "tutti/protocol/job_config.hpp"

#include <cstdio>
#include <sstream>

namespace tutti {

namespace {

std::string text(double x) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}
std::string text(int64_t x) { return std::to_string(x); }
std::string text(uint64_t x) { return std::to_string(x); }
std::string text(bool x) { return x ? "true" : "false"; }
std::string text(const std::string& x) { return x; }

} // namespace

std::vector<std::pair<std::string, std::string>>
config_fingerprint(const job_config& c) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const char* key, const auto& value) {
    out.emplace_back(key, text(value));
  };
  const auto& cl = c.cluster;
  add("cluster_config.world_size", cl.world_size);
  add("cluster_config.nnodes", cl.nnodes);
  add("cluster_config.nproc_per_node", cl.nproc_per_node);
  add("cluster_config.communication_backend", cl.communication_backend);
  add("cluster_config.device", cl.device);
  add("cluster_config.ep_size", cl.ep_size);
  add("cluster_config.tensor_model_parallel_size",
      cl.tensor_model_parallel_size);
  add("cluster_config.pipeline_model_parallel_size",
      cl.pipeline_model_parallel_size);
  add("cluster_config.collective_timeout_ms", cl.collective_timeout_ms);
  add("cluster_config.coordinator", cl.coordinator);
  for (int64_t i = 0; i < cl.nnodes && i < 4096; ++i) {
    auto n = cl.node(i);
    out.emplace_back("cluster_config.nodes[" + std::to_string(i) + "]",
                     n.host + ":" + std::to_string(n.port) + " rack "
                       + n.rack);
  }
  const auto& m = c.model;
  add("model.vocab_size", m.vocab_size);
  add("model.hidden_size", m.hidden_size);
  add("model.intermediate_size", m.intermediate_size);
  add("model.num_hidden_layers", m.num_hidden_layers);
  add("model.num_attention_heads", m.num_attention_heads);
  add("model.num_key_value_heads", m.num_key_value_heads);
  add("model.rope_theta", m.rope_theta);
  add("model.max_seq_len", m.max_seq_len);
  add("model.rms_norm_eps", m.rms_norm_eps);
  add("model.init_std", m.init_std);
  const auto& e = c.moe;
  add("moe_config.num_experts", e.num_experts);
  add("moe_config.router_top_k", e.router_top_k);
  add("moe_config.router_temperature", e.router_temperature);
  add("moe_config.capacity_factor", e.capacity_factor);
  add("moe_config.aux_loss_coeff", e.aux_loss_coeff);
  add("moe_config.z_loss_coeff", e.z_loss_coeff);
  add("moe_config.bias_update_rate", e.bias_update_rate);
  add("moe_config.all_to_all_communication", e.all_to_all_communication);
  add("moe_config.communication_buffer_size", e.communication_buffer_size);
  add("moe_config.combine_chunks", e.combine_chunks);
  const auto& t = c.train;
  add("train.steps", t.steps);
  add("train.global_batch_size", t.global_batch_size);
  add("train.seq_len", t.seq_len);
  add("train.lr", t.lr);
  add("train.min_lr", t.min_lr);
  add("train.warmup_steps", t.warmup_steps);
  add("train.weight_decay", t.weight_decay);
  add("train.beta1", t.beta1);
  add("train.beta2", t.beta2);
  add("train.eps", t.eps);
  add("train.grad_clip", t.grad_clip);
  add("train.gemm_precision", t.gemm_precision);
  add("train.seed", t.seed);
  add("train.eval_interval", t.eval_interval);
  add("train.eval_sequences", t.eval_sequences);
  add("data.shard_per_rank", c.data.shard_per_rank);
  add("checkpoint.interval_steps", c.checkpoint.interval_steps);
  // Every node must detect failures the same way.
  const auto& r = c.recovery;
  add("recovery.heartbeat_interval_ms", r.heartbeat_interval_ms);
  add("recovery.heartbeat_timeout_ms", r.heartbeat_timeout_ms);
  add("recovery.rendezvous_timeout_ms", r.rendezvous_timeout_ms);
  for (auto [kind, s] : {std::pair{"expert_shard", &c.supervision.expert_shard},
                         std::pair{"data_loader", &c.supervision.data_loader},
                         std::pair{"checkpoint_writer",
                                   &c.supervision.checkpoint_writer}}) {
    auto key = std::string("supervision.") + kind;
    out.emplace_back(key + ".strategy", s->strategy);
    out.emplace_back(key + ".restart", s->restart);
    out.emplace_back(key + ".max_restarts", text(s->max_restarts));
    out.emplace_back(key + ".period_s", text(s->period_s));
  }
  return out;
}

std::string fingerprint_text(const job_config& c) {
  std::ostringstream out;
  for (const auto& [key, value] : config_fingerprint(c))
    out << key << '=' << value << '\n';
  return out.str();
}

std::string first_difference(const std::string& ours,
                             const std::string& theirs) {
  std::istringstream a(ours), b(theirs);
  std::string la, lb;
  while (true) {
    bool ha = static_cast<bool>(std::getline(a, la));
    bool hb = static_cast<bool>(std::getline(b, lb));
    if (!ha && !hb)
      return "";
    if (la != lb || ha != hb) {
      auto key = (ha ? la : lb).substr(0, (ha ? la : lb).find('='));
      auto value = [](const std::string& line, bool has) {
        return has ? line.substr(line.find('=') + 1) : std::string("(absent)");
      };
      return key + ": " + value(la, ha) + " here, " + value(lb, hb)
             + " there";
    }
  }
}

} // namespace tutti
