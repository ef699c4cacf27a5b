// YAML -> job_config, strictly: every key known, every value of its type,
// every combination possible. One line per refusal, naming the key.

#include "tutti/protocol/job_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace tutti {
namespace {

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw config_error(key + ": " + why);
}

// Reads one mapping section and remembers which keys were read, so that
// whatever is left over can be refused as unknown.
class section {
public:
  // node_ is copy-constructed: yaml-cpp's operator= on a missing (zombie)
  // node throws instead of rebinding.
  section(const YAML::Node& root, std::string name, bool required)
    : name_(std::move(name)), node_(root[name_]) {
    if (!node_ || node_.IsNull()) {
      if (required)
        refuse(name_, "missing section");
      return;
    }
    if (!node_.IsMap())
      refuse(name_, "expected a mapping of keys");
  }

  // A mapping nested under `key` of `parent`, e.g. supervision.expert_shard.
  section(section& parent, const std::string& key)
    : name_(parent.path(key)) {
    parent.seen_.insert(key);
    if (parent.node_ && parent.node_.IsMap())
      node_.reset(parent.node_[key]);
    if (!node_ || node_.IsNull())
      return;
    if (!node_.IsMap())
      refuse(name_, "expected a mapping of keys");
  }

  template <class T>
  void read(const std::string& key, T& out, bool required = false) {
    seen_.insert(key);
    if (!node_ || !node_.IsMap())
      return;
    auto value = node_[key];
    if (!value || value.IsNull()) {
      if (required)
        refuse(path(key), "missing");
      return;
    }
    if (!value.IsScalar())
      refuse(path(key), "expected " + type_name<T>() + ", got a "
                          + (value.IsMap() ? "mapping" : "list"));
    try {
      out = convert<T>(value);
    } catch (const YAML::Exception&) {
      refuse(path(key), "expected " + type_name<T>() + ", got '"
                          + value.Scalar() + "'");
    }
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(out))
        refuse(path(key), "must be a finite number, got '" + value.Scalar()
                            + "'");
  }

  // `nodes:` is a list of {host, port, rack} mappings.
  void read_nodes(const std::string& key, std::vector<node_address>& out) {
    seen_.insert(key);
    if (!node_ || !node_.IsMap() || !node_[key] || node_[key].IsNull())
      return;
    auto list = node_[key];
    if (!list.IsSequence())
      refuse(path(key), "expected a list of {host, port, rack}");
    for (size_t i = 0; i < list.size(); ++i) {
      auto item = list[i];
      auto where = path(key) + "[" + std::to_string(i) + "]";
      if (!item.IsMap())
        refuse(where, "expected a mapping with host, port, rack");
      node_address a;
      for (const auto& kv : item) {
        if (!kv.first.IsScalar())
          refuse(where, "keys must be plain names");
        auto k = kv.first.Scalar();
        try {
          if (k == "host")
            a.host = kv.second.as<std::string>();
          else if (k == "port")
            a.port = convert<int64_t>(kv.second);
          else if (k == "rack")
            a.rack = kv.second.as<std::string>();
          else
            refuse(where + "." + k, "unknown key");
        } catch (const YAML::Exception&) {
          refuse(where + "." + k, "wrong type");
        }
      }
      out.push_back(std::move(a));
    }
  }

  // The users' `communication_buffer_size: "auto"`, or a byte count.
  void read_size_or_auto(const std::string& key, int64_t& out) {
    seen_.insert(key);
    if (!node_ || !node_.IsMap() || !node_[key] || node_[key].IsNull())
      return;
    auto value = node_[key];
    if (value.IsScalar() && value.Scalar() == "auto") {
      out = 0;
      return;
    }
    read(key, out);
  }

  // Refuses the first key that was never read.
  void finish() const {
    if (!node_ || !node_.IsMap())
      return;
    std::set<std::string> keys;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar())
        refuse(name_, "keys must be plain names, not lists or mappings");
      auto key = kv.first.Scalar();
      if (!keys.insert(key).second)
        refuse(path(key), "duplicate key");
      if (!seen_.count(key))
        refuse(path(key), "unknown key");
    }
  }

  std::string path(const std::string& key) const { return name_ + "." + key; }

private:
  template <class T>
  static T convert(const YAML::Node& value) {
    if constexpr (std::is_same_v<T, bool>) {
      return value.as<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      // yaml-cpp accepts "1.5" as an integer by truncation in some versions;
      // refuse anything that is not written as a whole number.
      const auto& text = value.Scalar();
      if (text.find_first_of(".eE") != std::string::npos)
        throw YAML::TypedBadConversion<T>(value.Mark());
      return value.as<T>();
    } else {
      return value.as<T>();
    }
  }

  template <class T>
  static std::string type_name() {
    if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_integral_v<T>)
      return "an integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else
      return "a string";
  }

  std::string name_;
  YAML::Node node_;
  std::set<std::string> seen_;
};

// A mapping key as text: keys must be plain names.
std::string key_text(const YAML::Node& key, const std::string& where) {
  if (!key.IsScalar())
    refuse(where, "keys must be plain names, not lists or mappings");
  return key.Scalar();
}

void require(bool ok, const std::string& key, const std::string& why) {
  if (!ok)
    refuse(key, why);
}

void validate_supervision(const std::string& kind, const supervision_spec& s) {
  const auto key = "supervision." + kind;
  require(s.strategy == "one_for_one" || s.strategy == "rest_for_one"
            || s.strategy == "one_for_all",
          key + ".strategy",
          "must be one_for_one, rest_for_one or one_for_all, got '"
            + s.strategy + "'");
  require(s.restart == "permanent" || s.restart == "transient"
            || s.restart == "temporary",
          key + ".restart",
          "must be permanent, transient or temporary, got '" + s.restart
            + "'");
  require(s.max_restarts >= 0, key + ".max_restarts", "must be >= 0");
  require(s.period_s > 0, key + ".period_s", "must be > 0");
}

void validate_recovery(const job_config& c) {
  const auto& r = c.recovery;
  const auto collective = c.cluster.collective_timeout_ms;
  require(r.heartbeat_interval_ms > 0, "recovery.heartbeat_interval_ms",
          "must be > 0");
  require(r.heartbeat_timeout_ms > r.heartbeat_interval_ms,
          "recovery.heartbeat_timeout_ms",
          "must be longer than recovery.heartbeat_interval_ms ("
            + std::to_string(r.heartbeat_interval_ms) + ")");
  require(r.heartbeat_timeout_ms < collective,
          "recovery.heartbeat_timeout_ms",
          "must be shorter than cluster_config.collective_timeout_ms ("
            + std::to_string(collective)
            + "): timeouts are ordered heartbeat < collective < rendezvous");
  require(collective < r.rendezvous_timeout_ms,
          "recovery.rendezvous_timeout_ms",
          "must be longer than cluster_config.collective_timeout_ms ("
            + std::to_string(collective)
            + "): timeouts are ordered heartbeat < collective < rendezvous");
  require(r.max_wait_s > 0, "recovery.max_wait_s", "must be > 0");
  require(r.straggler_factor > 1, "recovery.straggler_factor", "must be > 1");
  require(r.straggler_steps >= 1, "recovery.straggler_steps", "must be >= 1");
  require(c.metrics.port >= 0
            && c.metrics.port + c.cluster.nnodes - 1 <= 65535,
          "metrics.port",
          "must be 0 (off) or leave room for one port per node below 65536");
  const auto& a = c.alerts;
  require(a.checkpoint_failures >= 0, "alerts.checkpoint_failures",
          "must be >= 0");
  for (auto [key, v] : {std::pair{"alerts.memory_watermark_gb",
                                  a.memory_watermark_gb},
                        std::pair{"alerts.comm_time_factor", a.comm_time_factor},
                        std::pair{"alerts.expert_imbalance", a.expert_imbalance},
                        std::pair{"alerts.loss_spike_factor",
                                  a.loss_spike_factor},
                        std::pair{"alerts.slow_log_write_ms",
                                  a.slow_log_write_ms},
                        std::pair{"alerts.low_utilisation", a.low_utilisation}})
    require(v >= 0, key, "must be >= 0 (0 = off)");
  require(a.low_utilisation < 1, "alerts.low_utilisation",
          "is a share of the step time: must be < 1");
  validate_supervision("expert_shard", c.supervision.expert_shard);
  // A shard restarts from its own step-start snapshot while its rank
  // replays the step; stopping healthy siblings with it would only make
  // them redo work (and race the ones still finishing a request).
  require(c.supervision.expert_shard.strategy == "one_for_one",
          "supervision.expert_shard.strategy",
          "must be one_for_one: each expert shard restarts alone from its "
          "step-start snapshot");
  validate_supervision("data_loader", c.supervision.data_loader);
  validate_supervision("checkpoint_writer", c.supervision.checkpoint_writer);
}

void validate(const job_config& c) {
  const auto& cl = c.cluster;
  const auto& m = c.model;
  const auto& e = c.moe;
  const auto& t = c.train;
  require(cl.world_size >= 1, "cluster_config.world_size", "must be >= 1");
  require(cl.nnodes >= 1, "cluster_config.nnodes", "must be >= 1");
  require(cl.nproc_per_node >= 1, "cluster_config.nproc_per_node",
          "must be >= 1");
  // Bounded first, so the product below cannot overflow.
  require(cl.nnodes <= (int64_t{1} << 24), "cluster_config.nnodes",
          "must be <= 16777216");
  require(cl.nproc_per_node <= 1024, "cluster_config.nproc_per_node",
          "must be <= 1024");
  require(cl.world_size == cl.nnodes * cl.nproc_per_node,
          "cluster_config.world_size",
          "must equal nnodes * nproc_per_node ("
            + std::to_string(cl.nnodes) + " * "
            + std::to_string(cl.nproc_per_node) + " = "
            + std::to_string(cl.nnodes * cl.nproc_per_node) + "), got "
            + std::to_string(cl.world_size));
  require(!cl.communication_backend.empty(),
          "cluster_config.communication_backend", "must not be empty");
  require(cl.device == "cpu" || cl.device == "cuda", "cluster_config.device",
          "must be cpu or cuda, got '" + cl.device + "'");
  require(cl.communication_backend != "nccl" || cl.device == "cuda",
          "cluster_config.communication_backend",
          "nccl needs cluster_config.device: cuda");
  require(cl.coordinator_port() > 0 && cl.coordinator_port() < 65536
            && !cl.coordinator_host().empty(),
          "cluster_config.coordinator",
          "must be host:port, got '" + cl.coordinator + "'");
  require(cl.join_timeout_s > 0, "cluster_config.join_timeout_s",
          "must be > 0");
  require(cl.nodes.empty()
            || static_cast<int64_t>(cl.nodes.size()) == cl.nnodes,
          "cluster_config.nodes",
          "lists " + std::to_string(cl.nodes.size())
            + " nodes but nnodes is " + std::to_string(cl.nnodes));
  for (size_t i = 0; i < cl.nodes.size(); ++i)
    require(!cl.nodes[i].host.empty() && cl.nodes[i].port > 0
              && cl.nodes[i].port < 65536,
            "cluster_config.nodes[" + std::to_string(i) + "]",
            "needs host and a port in 1..65535");
  require(cl.device_memory_gb >= 0, "cluster_config.device_memory_gb",
          "must be >= 0");
  require(c.diag.min_fraction > 0 && c.diag.min_fraction <= 1,
          "diag.min_fraction", "must be in (0, 1]");
  require(c.diag.on_start == "off" || c.diag.on_start == "warn"
            || c.diag.on_start == "refuse",
          "diag.on_start", "must be off, warn or refuse");
  require(cl.tensor_model_parallel_size == 1,
          "cluster_config.tensor_model_parallel_size",
          "tensor parallelism is not supported yet; must be 1");
  require(cl.pipeline_model_parallel_size == 1,
          "cluster_config.pipeline_model_parallel_size",
          "pipeline parallelism is not supported yet; must be 1");
  require(cl.ep_size >= 1 && cl.world_size % cl.ep_size == 0,
          "cluster_config.ep_size",
          "must divide world_size " + std::to_string(cl.world_size)
            + ", got " + std::to_string(cl.ep_size));
  require(cl.collective_timeout_ms > 0, "cluster_config.collective_timeout_ms",
          "must be > 0");
  validate_recovery(c);

  require(m.vocab_size >= 2, "model.vocab_size", "must be >= 2");
  require(m.hidden_size >= 1, "model.hidden_size", "must be >= 1");
  require(m.intermediate_size >= 1, "model.intermediate_size", "must be >= 1");
  require(m.num_hidden_layers >= 1, "model.num_hidden_layers", "must be >= 1");
  require(m.num_attention_heads >= 1, "model.num_attention_heads",
          "must be >= 1");
  require(m.num_key_value_heads >= 1, "model.num_key_value_heads",
          "must be >= 1");
  require(m.num_attention_heads % m.num_key_value_heads == 0,
          "model.num_attention_heads",
          "must be a multiple of num_key_value_heads ("
            + std::to_string(m.num_attention_heads) + " % "
            + std::to_string(m.num_key_value_heads) + " != 0)");
  require(m.hidden_size % m.num_attention_heads == 0, "model.hidden_size",
          "must be a multiple of num_attention_heads");
  require(m.head_dim() % 2 == 0, "model.hidden_size",
          "head dimension (hidden_size / num_attention_heads) must be even "
          "for rotary embedding");
  require(m.rope_theta > 0, "model.rope_theta", "must be > 0");
  require(m.max_seq_len >= 1, "model.max_seq_len", "must be >= 1");
  require(m.rms_norm_eps > 0, "model.rms_norm_eps", "must be > 0");
  require(m.init_std > 0, "model.init_std", "must be > 0");

  require(e.num_experts >= 1, "moe_config.num_experts", "must be >= 1");
  require(e.router_top_k >= 1, "moe_config.router_top_k", "must be >= 1");
  require(e.router_top_k <= e.num_experts, "moe_config.router_top_k",
          "must be <= num_experts (" + std::to_string(e.router_top_k) + " > "
            + std::to_string(e.num_experts) + ")");
  require(e.num_experts % cl.ep_size == 0, "moe_config.num_experts",
          "must be divisible by ep_size (" + std::to_string(e.num_experts)
            + " % " + std::to_string(cl.ep_size) + " != 0)");
  require(e.router_temperature > 0, "moe_config.router_temperature",
          "must be > 0");
  require(e.capacity_factor >= 0, "moe_config.capacity_factor",
          "must be >= 0 (0 = dropless)");
  require(e.aux_loss_coeff >= 0, "moe_config.aux_loss_coeff", "must be >= 0");
  require(e.z_loss_coeff >= 0, "moe_config.z_loss_coeff", "must be >= 0");
  require(e.bias_update_rate >= 0, "moe_config.bias_update_rate",
          "must be >= 0 (0 = off)");
  require(e.all_to_all_communication == "enabled"
            || e.all_to_all_communication == "disabled",
          "moe_config.all_to_all_communication",
          "must be enabled or disabled, got '" + e.all_to_all_communication
            + "'");
  require(e.all_to_all_communication == "enabled" || cl.ep_size == 1,
          "moe_config.all_to_all_communication",
          "is disabled, which needs ep_size 1 (experts cannot be spread)");
  require(e.communication_buffer_size >= 0,
          "moe_config.communication_buffer_size", "must be auto or >= 0");
  require(e.combine_chunks >= 1, "moe_config.combine_chunks",
          "must be >= 1 (1 = no overlap)");

  require(t.steps >= 1, "train.steps", "must be >= 1");
  require(t.seq_len >= 1, "train.seq_len", "must be >= 1");
  require(t.seq_len <= m.max_seq_len, "train.seq_len",
          "must be <= model.max_seq_len");
  require(t.global_batch_size >= 1, "train.global_batch_size", "must be >= 1");
  require(t.global_batch_size % cl.world_size == 0, "train.global_batch_size",
          "must be divisible by world_size ("
            + std::to_string(t.global_batch_size) + " % "
            + std::to_string(cl.world_size) + " != 0)");
  require(t.lr > 0, "train.lr", "must be > 0");
  require(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr",
          "must be in [0, lr]");
  require(t.warmup_steps >= 0, "train.warmup_steps", "must be >= 0");
  require(t.weight_decay >= 0, "train.weight_decay", "must be >= 0");
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "must be in [0, 1)");
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "must be in [0, 1)");
  require(t.eps > 0, "train.eps", "must be > 0");
  require(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 = off)");
  require(t.gemm_precision == "fp32" || t.gemm_precision == "bf16",
          "train.gemm_precision",
          "must be fp32 or bf16, got '" + t.gemm_precision + "'");
  require(t.gemm_precision == "fp32" || c.cluster.device == "cuda",
          "train.gemm_precision", "bf16 needs cluster_config.device: cuda");
  require(t.eval_interval >= 0, "train.eval_interval", "must be >= 0");
  require(t.eval_sequences >= 0 && t.eval_sequences % cl.world_size == 0,
          "train.eval_sequences",
          "must be >= 0 and divisible by world_size");
  require(t.log_interval >= 1, "train.log_interval", "must be >= 1");

  require(!c.data.dir.empty(), "data.dir", "missing");
  require(c.data.prefetch >= 1, "data.prefetch", "must be >= 1");
  require(!c.run.dir.empty(), "run.dir", "missing");
  require(c.checkpoint.interval_steps >= 0, "checkpoint.interval_steps",
          "must be >= 0 (0 = only at the end)");
  require(c.checkpoint.keep_last >= 1, "checkpoint.keep_last", "must be >= 1");
}

} // namespace

job_config parse_job_config(const std::string& yaml_text,
                            const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& ex) {
    throw config_error(source_name + ": not valid YAML: " + ex.what());
  }
  if (!root.IsMap())
    throw config_error(source_name + ": expected a mapping of sections");

  job_config c;
  c.source_path = source_name;
  static const std::set<std::string> sections{
    "cluster_config", "model", "moe_config", "train", "data", "run",
    "checkpoint", "diag", "supervision", "recovery", "metrics", "alerts"};
  std::set<std::string> names;
  for (const auto& kv : root) {
    auto name = key_text(kv.first, source_name);
    if (!names.insert(name).second)
      refuse(name, "duplicate section");
    if (!sections.count(name))
      refuse(name, "unknown section");
  }

  section cl(root, "cluster_config", false);
  cl.read("world_size", c.cluster.world_size);
  cl.read("nnodes", c.cluster.nnodes);
  cl.read("nproc_per_node", c.cluster.nproc_per_node);
  cl.read("communication_backend", c.cluster.communication_backend);
  cl.read("device", c.cluster.device);
  cl.read("ep_size", c.cluster.ep_size);
  cl.read("tensor_model_parallel_size", c.cluster.tensor_model_parallel_size);
  cl.read("pipeline_model_parallel_size",
          c.cluster.pipeline_model_parallel_size);
  cl.read("host", c.cluster.host);
  cl.read("collective_timeout_ms", c.cluster.collective_timeout_ms);
  cl.read("coordinator", c.cluster.coordinator);
  cl.read("join_timeout_s", c.cluster.join_timeout_s);
  cl.read("device_memory_gb", c.cluster.device_memory_gb);
  cl.read("expected_bandwidth_gbps", c.cluster.expected_bandwidth_gbps);
  cl.read_nodes("nodes", c.cluster.nodes);
  cl.finish();
  if (c.cluster.ep_size == 0)
    c.cluster.ep_size = c.cluster.world_size;

  section m(root, "model", true);
  m.read("vocab_size", c.model.vocab_size, true);
  m.read("hidden_size", c.model.hidden_size, true);
  m.read("intermediate_size", c.model.intermediate_size, true);
  m.read("num_hidden_layers", c.model.num_hidden_layers, true);
  m.read("num_attention_heads", c.model.num_attention_heads, true);
  m.read("num_key_value_heads", c.model.num_key_value_heads, true);
  m.read("rope_theta", c.model.rope_theta);
  m.read("max_seq_len", c.model.max_seq_len, true);
  m.read("rms_norm_eps", c.model.rms_norm_eps);
  m.read("init_std", c.model.init_std);
  m.finish();

  section e(root, "moe_config", true);
  e.read("num_experts", c.moe.num_experts, true);
  e.read("router_top_k", c.moe.router_top_k, true);
  e.read("router_temperature", c.moe.router_temperature);
  e.read("capacity_factor", c.moe.capacity_factor);
  e.read("aux_loss_coeff", c.moe.aux_loss_coeff);
  e.read("z_loss_coeff", c.moe.z_loss_coeff);
  e.read("bias_update_rate", c.moe.bias_update_rate);
  e.read("all_to_all_communication", c.moe.all_to_all_communication);
  e.read_size_or_auto("communication_buffer_size",
                      c.moe.communication_buffer_size);
  e.read("combine_chunks", c.moe.combine_chunks);
  e.finish();

  section t(root, "train", true);
  t.read("steps", c.train.steps, true);
  t.read("global_batch_size", c.train.global_batch_size, true);
  t.read("seq_len", c.train.seq_len, true);
  t.read("lr", c.train.lr);
  t.read("min_lr", c.train.min_lr);
  t.read("warmup_steps", c.train.warmup_steps);
  t.read("weight_decay", c.train.weight_decay);
  t.read("beta1", c.train.beta1);
  t.read("beta2", c.train.beta2);
  t.read("eps", c.train.eps);
  t.read("grad_clip", c.train.grad_clip);
  t.read("gemm_precision", c.train.gemm_precision);
  t.read("seed", c.train.seed);
  t.read("eval_interval", c.train.eval_interval);
  t.read("eval_sequences", c.train.eval_sequences);
  t.read("log_interval", c.train.log_interval);
  t.finish();

  section d(root, "data", true);
  d.read("dir", c.data.dir, true);
  d.read("shard_per_rank", c.data.shard_per_rank);
  d.read("prefetch", c.data.prefetch);
  d.finish();

  section r(root, "run", true);
  r.read("dir", c.run.dir, true);
  r.finish();

  section ck(root, "checkpoint", false);
  ck.read("interval_steps", c.checkpoint.interval_steps);
  ck.read("keep_last", c.checkpoint.keep_last);
  ck.read("dir", c.checkpoint.dir);
  ck.finish();

  section dg(root, "diag", false);
  dg.read("min_fraction", c.diag.min_fraction);
  dg.read("on_start", c.diag.on_start);
  dg.finish();

  section sv(root, "supervision", false);
  for (auto [kind, spec] :
       {std::pair{"expert_shard", &c.supervision.expert_shard},
        std::pair{"data_loader", &c.supervision.data_loader},
        std::pair{"checkpoint_writer", &c.supervision.checkpoint_writer}}) {
    section k(sv, kind);
    k.read("strategy", spec->strategy);
    k.read("restart", spec->restart);
    k.read("max_restarts", spec->max_restarts);
    k.read("period_s", spec->period_s);
    k.finish();
  }
  sv.finish();

  section rc(root, "recovery", false);
  rc.read("heartbeat_interval_ms", c.recovery.heartbeat_interval_ms);
  rc.read("heartbeat_timeout_ms", c.recovery.heartbeat_timeout_ms);
  rc.read("rendezvous_timeout_ms", c.recovery.rendezvous_timeout_ms);
  rc.read("max_wait_s", c.recovery.max_wait_s);
  rc.read("straggler_factor", c.recovery.straggler_factor);
  rc.read("straggler_steps", c.recovery.straggler_steps);
  rc.finish();

  section mt(root, "metrics", false);
  mt.read("port", c.metrics.port);
  mt.finish();

  section al(root, "alerts", false);
  al.read("checkpoint_failures", c.alerts.checkpoint_failures);
  al.read("memory_watermark_gb", c.alerts.memory_watermark_gb);
  al.read("comm_time_factor", c.alerts.comm_time_factor);
  al.read("expert_imbalance", c.alerts.expert_imbalance);
  al.read("loss_spike_factor", c.alerts.loss_spike_factor);
  al.read("slow_log_write_ms", c.alerts.slow_log_write_ms);
  al.read("low_utilisation", c.alerts.low_utilisation);
  al.finish();

  validate(c);
  return c;
}

std::string cluster_config::coordinator_host() const {
  auto colon = coordinator.rfind(':');
  return colon == std::string::npos ? "" : coordinator.substr(0, colon);
}

int64_t cluster_config::coordinator_port() const {
  auto colon = coordinator.rfind(':');
  if (colon == std::string::npos)
    return 0;
  try {
    size_t used = 0;
    auto text = coordinator.substr(colon + 1);
    auto port = std::stoll(text, &used);
    return used == text.size() ? port : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

node_address cluster_config::node(int64_t rank) const {
  if (rank >= 0 && rank < static_cast<int64_t>(nodes.size()))
    return nodes[rank];
  return {host, coordinator_port() + 1 + rank, ""};
}

job_config load_job_config(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw config_error(path + ": cannot open config file");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_job_config(buf.str(), path);
}

} // namespace tutti
