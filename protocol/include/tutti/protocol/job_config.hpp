#pragma once
// The job spec: everything a cluster agrees on before a step runs. Parsed
// from YAML by load_job_config(); every key is checked (unknown keys, wrong
// types and impossible combinations are refused with one line naming the key).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tutti {

// One daemon's place in the cluster: where it listens and which rack it is
// in (for rack-aware placement and the capacity plan).
struct node_address {
  std::string host;
  int64_t port = 0;
  std::string rack;
};

struct cluster_config {
  int64_t world_size = 1;
  int64_t nnodes = 1;
  int64_t nproc_per_node = 1;
  // gloo | nccl run; any other name is accepted (the plan works on it) and
  // refused when a job would start.
  std::string communication_backend = "gloo";
  // Where ranks compute: cpu, or cuda (local rank i on GPU i % count; the
  // expert shards on their rank's GPU). nccl needs cuda; gloo runs either
  // (a GPU model stages its collectives through the host).
  std::string device = "cpu";
  int64_t ep_size = 0;                        // 0 = world_size
  int64_t tensor_model_parallel_size = 1;     // only 1 for now
  int64_t pipeline_model_parallel_size = 1;   // only 1 for now
  std::string host = "127.0.0.1";             // address the data plane binds to
  int64_t collective_timeout_ms = 60000;
  std::string coordinator = "127.0.0.1:7100"; // host:port, hosted by node 0
  int64_t join_timeout_s = 60;                // all nodes must register by then
  std::vector<node_address> nodes;            // optional; index = node rank
  double device_memory_gb = 0;                // for `tutti plan`; 0 = unknown
  double expected_bandwidth_gbps = 0;         // for `tutti diag`; 0 = median

  std::string coordinator_host() const;
  int64_t coordinator_port() const;
  // Where node `rank` listens: nodes[rank] if given, else `host` and
  // coordinator port + 1 + rank.
  node_address node(int64_t rank) const;
};

struct diag_config {
  double min_fraction = 0.9;        // below this share of the reference: straggler
  std::string on_start = "off";     // off | warn | refuse: pre-flight check
};

struct model_config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  double rope_theta = 10000.0;
  int64_t max_seq_len = 0;
  double rms_norm_eps = 1e-5;
  double init_std = 0.02;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

struct moe_config {
  int64_t num_experts = 0;
  int64_t router_top_k = 0;
  double router_temperature = 1.0;
  double capacity_factor = 0.0; // 0 = dropless
  double aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;
  double bias_update_rate = 0.0; // 0 = off
  std::string all_to_all_communication = "enabled"; // the users' key
  int64_t communication_buffer_size = 0;            // bytes; 0 = auto
  // The combine all-to-all (forward, and the input gradients backward) in
  // up to this many chunks of a rank's experts, each sent while the expert
  // shard computes the next (1 = no overlap).
  int64_t combine_chunks = 2;
};

struct train_config {
  int64_t steps = 0;
  int64_t global_batch_size = 0; // sequences per step, over all ranks
  int64_t seq_len = 0;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0; // 0 = off
  // GEMM inputs: fp32, or bf16 (cuda only) with fp32 accumulation, fp32
  // master weights and fp32 gradients.
  std::string gemm_precision = "fp32";
  uint64_t seed = 1234;
  int64_t eval_interval = 0; // 0 = only at the end
  int64_t eval_sequences = 0; // held-out sequences per evaluation
  int64_t log_interval = 1;
};

struct data_config {
  std::string dir;
  bool shard_per_rank = false;
  int64_t prefetch = 2;
};

struct run_config {
  std::string dir;
};

struct checkpoint_config {
  int64_t interval_steps = 0; // 0 = only at the end of the job
  int64_t keep_last = 3;      // retention; the newest verified is always kept
  std::string dir;            // default RUN_DIR/checkpoints

  std::string root(const run_config& run) const {
    return dir.empty() ? run.dir + "/checkpoints" : dir;
  }
};

// How one kind of child is supervised, Erlang/OTP style: its supervisor's
// strategy and restart intensity (more than max_restarts within period_s
// escalates to the node, then the coordinator), and the children's restart
// type.
struct supervision_spec {
  std::string strategy = "one_for_one"; // one_for_one | rest_for_one | one_for_all
  std::string restart = "permanent";    // permanent | transient | temporary
  int64_t max_restarts = 3;
  double period_s = 60;
};

struct supervision_config {
  supervision_spec expert_shard;
  supervision_spec data_loader;
  supervision_spec checkpoint_writer;
};

// Detecting lost nodes and getting the job back. Timeouts are ordered
// heartbeat_timeout_ms < cluster_config.collective_timeout_ms <
// rendezvous_timeout_ms: a dead node is noticed before a collective gives
// up on it, and a collective before a rendezvous does.
struct recovery_config {
  int64_t heartbeat_interval_ms = 1000;
  int64_t heartbeat_timeout_ms = 10000;
  int64_t rendezvous_timeout_ms = 120000; // communicator (re)connection
  double max_wait_s = 600;     // wait for a lost node, then pause the job
  double straggler_factor = 2; // step time over the median of all ranks ...
  int64_t straggler_steps = 5; // ... this many steps in a row: an alert
};

// Prometheus: node N serves /metrics on its own host at port + N (0 = off).
struct metrics_config {
  int64_t port = 0;
};

// Alert rules, by level. critical: the job interrupted (always on), this
// many checkpoint failures in a row; important: a daemon's memory over
// the watermark, all-to-all time over its baseline times a factor, one
// expert over the mean load times a factor, the loss NaN or over its
// recent mean times a factor; normal: metrics lines slower to write than
// a limit, compute under a share of the step time. 0 turns a rule off.
struct alerts_config {
  int64_t checkpoint_failures = 2;
  double memory_watermark_gb = 0;
  double comm_time_factor = 3;
  double expert_imbalance = 0;
  double loss_spike_factor = 3;
  double slow_log_write_ms = 200;
  double low_utilisation = 0;
};

struct job_config {
  cluster_config cluster;
  model_config model;
  moe_config moe;
  train_config train;
  data_config data;
  run_config run;
  checkpoint_config checkpoint;
  diag_config diag;
  supervision_config supervision;
  recovery_config recovery;
  metrics_config metrics;
  alerts_config alerts;
  std::string source_path; // the file it came from, for messages

  int64_t ep_size() const { return cluster.ep_size; }
  int64_t experts_per_rank() const { return moe.num_experts / cluster.ep_size; }
};

// The config as sorted "section.key" = value pairs: what every node of a job
// must agree on. Its hash identifies the config; comparing two lists names
// the first key that differs.
std::vector<std::pair<std::string, std::string>>
config_fingerprint(const job_config& c);
std::string fingerprint_text(const job_config& c);

// The first differing key of two fingerprints ("" if equal), as
// "model.hidden_size: 64 here, 128 there".
std::string first_difference(const std::string& ours,
                             const std::string& theirs);

// A refused config: what() is one line naming the key and why.
struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Loads and validates; throws config_error. Relative paths in data.dir and
// run.dir are kept as written (relative to the working directory).
job_config load_job_config(const std::string& path);
job_config parse_job_config(const std::string& yaml_text,
                            const std::string& source_name);

} // namespace tutti
