#pragma once
// The job spec: everything a cluster agrees on before a step runs. Each
// section is a struct whose members carry the defaults, and one
// visit_fields overload that declares its keys once: name, doc and checks
// (field.hpp). Parsing, per-key validation, the fingerprint and the key
// reference (docs/config-reference.md, tools/config_keys) are all derived
// from those overloads; checks across keys are in src/cross_checks.cpp.
//
// The model and MoE sections are in model_config.hpp.
//
// Adding a key: a member with its default, and one v.field(...) line.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/enums.hpp"
#include "tutti/config/field.hpp"
#include "tutti/config/model_config.hpp"
#include "tutti/config/security_config.hpp"
#include "tutti/config/train_config.hpp"

namespace tutti {

// One daemon's place in the cluster: where it listens and which rack it is
// in (for rack-aware placement and the capacity plan).
struct node_address {
  std::string host;
  int64_t port = 0;
  std::string rack;
};

template <class Visitor>
void visit_fields(Visitor& v, node_address& c) {
  v.field("host", c.host, "address the node's daemon listens on");
  v.field("port", c.port, "its port");
  v.field("rack", c.rack, "rack label, for placement and the plan");
}

struct cluster_config {
  int64_t world_size = 1;
  int64_t nnodes = 1;
  int64_t nproc_per_node = 1;
  std::string communication_backend = "gloo"; // an open set: enums.hpp
  compute_device device = compute_device::cpu;
  int64_t ep_size = 0; // 0 = filled in by the loader (see its doc)
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  std::vector<int64_t> pipeline_layers; // per stage; empty = even shares
  int64_t pipeline_first_stage_layers = 0; // 0 = an even share
  int64_t pipeline_last_stage_layers = 0;
  int64_t pipeline_virtual_stages = 1; // model chunks per stage (interleaved)
  std::string host = "127.0.0.1";
  int64_t collective_timeout_ms = 60000;
  local_transport_kind local_transport = local_transport_kind::memory;
  bool pin_rank_cores = true; // base/core_pinning.hpp
  std::string coordinator = "127.0.0.1:7100";
  int64_t join_timeout_s = 60;
  std::vector<node_address> nodes; // index = node rank
  double device_memory_gb = 0;
  double expected_bandwidth_gbps = 0;
  // Link classes for rack-aware placement (0 = unknown; see topology).
  double intra_node_gbps = 0;
  double intra_rack_gbps = 0;
  double inter_rack_gbps = 0;
  std::string intra_rack_backend; // seed 001's names, e.g. nvlink_like
  std::string inter_rack_backend; // e.g. high_speed_ethernet

  backend_kind backend() const {
    return from_string<backend_kind>(communication_backend)
      .value_or(backend_kind::other);
  }
  std::string coordinator_host() const;
  int64_t coordinator_port() const;
  // Where node `rank` listens: nodes[rank] if given, else `host` and
  // coordinator port + 1 + rank.
  node_address node(int64_t rank) const;
};

template <class Visitor>
void visit_fields(Visitor& v, cluster_config& c) {
  using namespace config;
  v.field("world_size", c.world_size,
          "ranks in the job: nnodes * nproc_per_node", at_least(1));
  v.field("nnodes", c.nnodes, "nodes (daemons)", at_least(1), at_most(1 << 24));
  v.field("nproc_per_node", c.nproc_per_node, "ranks per node", at_least(1),
          at_most(1024));
  v.field("communication_backend", c.communication_backend,
          "gloo or nccl (nccl needs device cuda); another name is planned "
          "but refused when a job starts",
          not_empty{});
  v.field("device", c.device,
          "where ranks compute; cuda: local rank i on GPU i % count, its "
          "expert shard on the same GPU");
  v.field("ep_size", c.ep_size,
          "ranks the experts are spread over; divides the data-parallel "
          "size world_size / (tensor_model_parallel_size * "
          "pipeline_model_parallel_size) and moe_config.num_experts (0 = "
          "the largest that divides both)");
  v.field("tensor_model_parallel_size", c.tensor_model_parallel_size,
          "tensor parallelism (Megatron): attention heads, the experts' "
          "intermediate dimension and the embedding's and LM head's "
          "vocabulary split over this many consecutive ranks (keep it a "
          "divisor of nproc_per_node); divides world_size, "
          "num_key_value_heads, intermediate_size and vocab_size",
          at_least(1));
  v.field("pipeline_model_parallel_size", c.pipeline_model_parallel_size,
          "pipeline parallelism (Megatron, 1F1B): the layers split into this "
          "many contiguous stages, train.micro_batches in flight; divides "
          "num_hidden_layers (unless pipeline_layers or the first/last "
          "stage counts give the stages' layers), and times "
          "tensor_model_parallel_size divides world_size",
          at_least(1));
  v.field("pipeline_layers", c.pipeline_layers,
          "layers of each pipeline stage, first to last (e.g. [3, 4, 4, "
          "2]): as many as pipeline_model_parallel_size, summing to "
          "num_hidden_layers (empty = equal stages); with "
          "pipeline_virtual_stages V, P x V counts, one per model chunk in "
          "virtual-stage order (chunk c of stage s is entry c * P + s)");
  v.field("pipeline_first_stage_layers", c.pipeline_first_stage_layers,
          "layers of the first stage, the embedding's (Megatron's "
          "decoder_first_pipeline_num_layers); the stages without a count "
          "share the rest equally",
          at_least(0, "0 = an equal share"));
  v.field("pipeline_last_stage_layers", c.pipeline_last_stage_layers,
          "layers of the last stage, the LM head's; as "
          "pipeline_first_stage_layers",
          at_least(0, "0 = an equal share"));
  v.field("pipeline_virtual_stages", c.pipeline_virtual_stages,
          "model chunks per pipeline stage (Megatron's "
          "virtual_pipeline_model_parallel_size): the layers split into "
          "pipeline_model_parallel_size * this many equal chunks, stage s "
          "holding chunks s, s + pp, ..., run by the interleaved 1F1B "
          "schedule, whose bubble is (pp - 1) / (this * micro_batches + pp "
          "- 1); needs equal chunks or a list of them (pipeline_layers) and "
          "train.micro_batches a multiple of pipeline_model_parallel_size",
          at_least(1));
  v.field("host", c.host, "address the data plane binds to without nodes",
          not_fingerprinted);
  v.field("collective_timeout_ms", c.collective_timeout_ms,
          "a collective gives up on a silent peer after this long", above(0));
  v.field("local_transport", c.local_transport,
          "how a group whose ranks share a process exchanges (all of `tutti "
          "run`, one node's under tuttid): memory (copies in the process) or "
          "tcp (Gloo over loopback, as across nodes); same results either "
          "way; gloo backend only",
          not_fingerprinted);
  v.field("pin_rank_cores", c.pin_rank_cores,
          "device cpu: each rank's thread, and its expert shard's, on a core "
          "of its own when the process hosts several ranks and may use a "
          "core for each (several such daemons on one host: give each its "
          "own cores, or turn this off; off: the scheduler moves them, "
          "slower in bench_step)",
          not_fingerprinted);
  v.field("coordinator", c.coordinator,
          "host:port of the coordinator, on "
          "node 0");
  v.field("join_timeout_s", c.join_timeout_s,
          "all nodes must register within this long", above(0),
          not_fingerprinted);
  // Fingerprinted as where each node listens (cluster_config.nodes[i]),
  // which covers `host` and the coordinator port when the list is empty.
  v.field("nodes", c.nodes,
          "where each node listens, index = node rank "
          "(default: host, coordinator port + 1 + rank)",
          not_fingerprinted);
  v.field("device_memory_gb", c.device_memory_gb,
          "memory per device, for `tutti plan` (0 = unknown)", at_least(0),
          not_fingerprinted);
  v.field("expected_bandwidth_gbps", c.expected_bandwidth_gbps,
          "link bandwidth `tutti diag` compares to (0 = the median)",
          not_fingerprinted);
  v.field("intra_node_gbps", c.intra_node_gbps,
          "bandwidth between ranks of one node, for placement (0 = from "
          "intra_rack_backend, else 8x intra_rack_gbps)",
          at_least(0), not_fingerprinted);
  v.field("intra_rack_gbps", c.intra_rack_gbps,
          "bandwidth between nodes of one rack, for placement (0 = from "
          "intra_rack_backend, else 100)",
          at_least(0), not_fingerprinted);
  v.field("inter_rack_gbps", c.inter_rack_gbps,
          "bandwidth between racks, for placement (0 = from "
          "inter_rack_backend, else intra_rack_gbps / 8)",
          at_least(0), not_fingerprinted);
  v.field("intra_rack_backend", c.intra_rack_backend,
          "the link inside a rack by name (nvlink_like, infiniband, "
          "high_speed_ethernet, ethernet): its bandwidth when "
          "intra_rack_gbps is 0",
          not_fingerprinted);
  v.field("inter_rack_backend", c.inter_rack_backend,
          "the link between racks by name (as intra_rack_backend): its "
          "bandwidth when inter_rack_gbps is 0",
          not_fingerprinted);
}

struct diag_config {
  double min_fraction = 0.9;
  preflight_check on_start = preflight_check::off;
  preflight_check environment = preflight_check::refuse;
};

template <class Visitor>
void visit_fields(Visitor& v, diag_config& c) {
  using namespace config;
  v.field("min_fraction", c.min_fraction,
          "a link below this share of the reference is a straggler",
          in_range(0, 1, "(]"), not_fingerprinted);
  v.field("on_start", c.on_start,
          "run the interconnect check before every job start; refuse: do "
          "not start with a straggler",
          not_fingerprinted);
  v.field("environment", c.environment,
          "a node whose build id, libraries, OS or data files differ from "
          "the coordinator's: refuse it (naming node and component), warn, "
          "or off",
          not_fingerprinted);
}

struct data_config {
  std::string dir;
  bool shard_per_rank = false;
  int64_t prefetch = 2;
  double read_mb_s = 0;
  bool rack_affinity = false;
};

template <class Visitor>
void visit_fields(Visitor& v, data_config& c) {
  using namespace config;
  v.field("dir", c.dir, "token shards (relative: to the working directory)",
          required, not_empty{"missing"}, not_fingerprinted);
  v.field("shard_per_rank", c.shard_per_rank,
          "each rank reads its own shard files");
  v.field("prefetch", c.prefetch, "batches a loader keeps ready", at_least(1),
          not_fingerprinted);
  v.field("read_mb_s", c.read_mb_s,
          "cap on each loader's reads, MB/s of tokens (a shared filesystem's "
          "share, or a slow disk to test against)",
          at_least(0, "0 = no cap"), not_fingerprinted);
  v.field("rack_affinity", c.rack_affinity,
          "deal each step's windows to the ranks of the rack (then the "
          "rank) holding most of their tokens' experts (each token's own, "
          "moe_config.placement's token_experts), so tokens start where "
          "their experts are; each rank keeps its share of windows; "
          "results agree within float rounding, not to the bit",
          not_fingerprinted);
}

struct run_config {
  std::string dir;
};

template <class Visitor>
void visit_fields(Visitor& v, run_config& c) {
  using namespace config;
  v.field("dir", c.dir, "the run's logs, metrics, store and checkpoints",
          required, not_empty{"missing"}, not_fingerprinted);
}

struct checkpoint_config {
  int64_t interval_steps = 0;
  int64_t keep_last = 3;
  std::string dir;
  int64_t milestone_every = 0;
  std::string archive_dir;
  double expire_after_h = 0;
  double min_free_gb = 0;

  std::string root(const run_config& run) const {
    return dir.empty() ? run.dir + "/checkpoints" : dir;
  }
};

template <class Visitor>
void visit_fields(Visitor& v, checkpoint_config& c) {
  using namespace config;
  v.field("interval_steps", c.interval_steps, "steps between checkpoints",
          at_least(0, "0 = only at the end"));
  v.field("keep_last", c.keep_last,
          "checkpoints kept; the newest verified one always is", at_least(1),
          not_fingerprinted);
  v.field("dir", c.dir, "where checkpoints go (empty: RUN_DIR/checkpoints)",
          not_fingerprinted);
  v.field("milestone_every", c.milestone_every,
          "keep every checkpoint whose step is a multiple of this, in both "
          "tiers, beside keep_last",
          at_least(0, "0 = no milestones"), not_fingerprinted);
  v.field("archive_dir", c.archive_dir,
          "a slower tier: each committed checkpoint is copied here in the "
          "background and verified; resume and rollback look here too",
          not_fingerprinted);
  v.field("expire_after_h", c.expire_after_h,
          "remove checkpoints older than this (hours), in both tiers; never "
          "a milestone or the newest",
          at_least(0, "0 = never"), not_fingerprinted);
  v.field("min_free_gb", c.min_free_gb,
          "free space to leave on the checkpoint disk: a save that would "
          "eat into it is refused before writing, and an alert fires once "
          "the next save would",
          at_least(0), not_fingerprinted);
}

// How one kind of child is supervised, Erlang/OTP style: its supervisor's
// strategy and restart intensity (more than max_restarts within period_s
// escalates to the node, then the coordinator), and the children's restart
// type. The actors' supervisor takes its defaults from here.
struct supervision_spec {
  restart_strategy strategy = restart_strategy::one_for_one;
  restart_type restart = restart_type::permanent;
  int64_t max_restarts = 3;
  double period_s = 60;

  constexpr std::chrono::milliseconds period() const {
    return std::chrono::milliseconds(static_cast<int64_t>(period_s * 1000.0));
  }
};

template <class Visitor>
void visit_fields(Visitor& v, supervision_spec& c) {
  using namespace config;
  v.field("strategy", c.strategy,
          "which children restart with a failed one (expert_shard: "
          "one_for_one only)");
  v.field("restart", c.restart, "whether a child that ended comes back");
  v.field("max_restarts", c.max_restarts,
          "restarts within period_s before escalating", at_least(0));
  v.field("period_s", c.period_s, "the restart intensity's window", above(0));
}

struct supervision_config {
  supervision_spec expert_shard;
  supervision_spec data_loader;
  supervision_spec checkpoint_writer;
};

template <class Visitor>
void visit_fields(Visitor& v, supervision_config& c) {
  v.field("expert_shard", c.expert_shard, "a rank's expert shard");
  v.field("data_loader", c.data_loader, "a rank's data loader");
  v.field("checkpoint_writer", c.checkpoint_writer,
          "a node's checkpoint writer");
}

// Detecting lost nodes and getting the job back. Timeouts are ordered
// heartbeat_timeout_ms < cluster_config.collective_timeout_ms <
// rendezvous_timeout_ms: a dead node is noticed before a collective gives
// up on it, and a collective before a rendezvous does.
struct recovery_config {
  int64_t heartbeat_interval_ms = 1000;
  int64_t heartbeat_timeout_ms = 10000;
  int64_t rendezvous_timeout_ms = 120000;
  double max_wait_s = 600;
  double straggler_factor = 2;
  int64_t straggler_steps = 5;
};

template <class Visitor>
void visit_fields(Visitor& v, recovery_config& c) {
  using namespace config;
  v.field("heartbeat_interval_ms", c.heartbeat_interval_ms,
          "between a daemon's heartbeats", above(0));
  v.field("heartbeat_timeout_ms", c.heartbeat_timeout_ms,
          "a daemon silent this long is lost; between heartbeat_interval_ms "
          "and cluster_config.collective_timeout_ms");
  v.field("rendezvous_timeout_ms", c.rendezvous_timeout_ms,
          "communicator (re)connection; over "
          "cluster_config.collective_timeout_ms");
  v.field("max_wait_s", c.max_wait_s,
          "wait this long for a lost node, then pause the job", above(0),
          not_fingerprinted);
  v.field("straggler_factor", c.straggler_factor,
          "a rank's step time over the median times this ...", above(1),
          not_fingerprinted);
  v.field("straggler_steps", c.straggler_steps,
          "... this many steps in a row: a straggler alert", at_least(1),
          not_fingerprinted);
}

// Going on without lost nodes (elastic/shrink_layout.hpp): past
// shrink_after_s with neither the node nor a spare back, the survivors
// train on from the newest checkpoint at a smaller data-parallel size, and
// the job returns to its full layout when the nodes do.
struct elastic_config {
  int64_t min_nodes = 0; // 0: off, a lost node is waited for
  double shrink_after_s = 30;
  int64_t replica_interval_steps = 0; // 0: off
};

template <class Visitor>
void visit_fields(Visitor& v, elastic_config& c) {
  using namespace config;
  v.field("min_nodes", c.min_nodes,
          "go on with this many nodes or more when some are lost and no "
          "spare takes their place (0 = off: wait for them); at most "
          "cluster_config.nnodes",
          at_least(0), not_fingerprinted);
  v.field("shrink_after_s", c.shrink_after_s,
          "how long a recovery waits for a lost node or a spare before the "
          "survivors go on without it",
          above(0), not_fingerprinted);
  v.field("replica_interval_steps", c.replica_interval_steps,
          "every this many steps each rank copies its state to a rank of "
          "another node (another rack where there is one), in memory; a "
          "recovery resumes from the newest step whose copies survive "
          "instead of the newest checkpoint (0 = off)",
          at_least(0), not_fingerprinted);
}

// Prometheus: node N serves /metrics on its own host at port + N.
struct metrics_config {
  int64_t port = 0;
  std::string web_config;
};

template <class Visitor>
void visit_fields(Visitor& v, metrics_config& c) {
  using namespace config;
  v.field("port", c.port,
          "node N serves /metrics at port + N (0 = off); below 65536 for "
          "every node",
          not_fingerprinted);
  v.field("web_config", c.web_config,
          "TLS and basic auth for /metrics and /dashboard: a Prometheus web "
          "config file (tls_server_config, basic_auth_users with bcrypt "
          "hashes)",
          not_fingerprinted);
}

// Alert rules, by level. critical: the job interrupted (always on), this
// many checkpoint failures in a row; important: a daemon's memory over
// the watermark, all-to-all time over its baseline times a factor, one
// expert over the mean load times a factor, the loss NaN or over its
// recent mean times a factor; normal: metrics lines slower to write than
// a limit, compute under a share of the step time, ranks waiting for their
// data loader over a share of the step time. 0 turns a rule off. The rules
// judged per step fire after hold_steps in a row, resolve after
// clear_steps clear, and a rule firing flap_firings times within
// flap_window_steps is flapping: said once, firing until clear that long.
struct alerts_config {
  int64_t checkpoint_failures = 2;
  double memory_watermark_gb = 0;
  double comm_time_factor = 3;
  double expert_imbalance = 0;
  double loss_spike_factor = 3;
  double slow_log_write_ms = 200;
  double low_utilisation = 0;
  double data_wait = 0.25;
  double cross_rack_share = 0;
  double replica_stall = 0.25;
  int64_t hold_steps = 3;
  int64_t clear_steps = 10;
  int64_t flap_firings = 4;
  int64_t flap_window_steps = 200;
};

template <class Visitor>
void visit_fields(Visitor& v, alerts_config& c) {
  using namespace config;
  v.field("checkpoint_failures", c.checkpoint_failures,
          "critical: this many failed checkpoints in a row", at_least(0),
          not_fingerprinted);
  v.field("memory_watermark_gb", c.memory_watermark_gb,
          "important: a daemon's memory over this", at_least(0, "0 = off"),
          not_fingerprinted);
  v.field("comm_time_factor", c.comm_time_factor,
          "important: all-to-all exchange time (less the wait for late "
          "ranks) over its baseline times this",
          at_least(0, "0 = off"), not_fingerprinted);
  v.field("expert_imbalance", c.expert_imbalance,
          "important: an expert over the mean load times this",
          at_least(0, "0 = off"), not_fingerprinted);
  v.field("loss_spike_factor", c.loss_spike_factor,
          "important: the loss NaN or over its recent mean times this",
          at_least(0, "0 = off"), not_fingerprinted);
  v.field("slow_log_write_ms", c.slow_log_write_ms,
          "normal: a metrics line slower to write than this",
          at_least(0, "0 = off"), not_fingerprinted);
  v.field("low_utilisation", c.low_utilisation,
          "normal: compute under this share of the step time",
          at_least(0, "0 = off"),
          with_message(below(1), "is a share of the step time: must be < 1"),
          not_fingerprinted);
  v.field("data_wait", c.data_wait,
          "important: ranks waiting for their batches over this share of "
          "the step time (and 10 ms)",
          at_least(0, "0 = off"),
          with_message(below(1), "is a share of the step time: must be < 1"),
          not_fingerprinted);
  v.field("cross_rack_share", c.cross_rack_share,
          "important: over this share of a step's all-to-all bytes on "
          "links crossed racks",
          at_least(0, "0 = off"),
          with_message(below(1), "is a share of the bytes: must be < 1"),
          not_fingerprinted);
  v.field("replica_stall", c.replica_stall,
          "important: ranks waiting for their in-memory copies (the "
          "snapshot, a copy still travelling) over this share of the step "
          "time (and 10 ms)",
          at_least(0, "0 = off"),
          with_message(below(1), "is a share of the step time: must be < 1"),
          not_fingerprinted);
  v.field("hold_steps", c.hold_steps,
          "a rule fires after its condition holds this many steps in a row "
          "(a NaN loss at once)",
          at_least(1), not_fingerprinted);
  v.field("clear_steps", c.clear_steps,
          "a firing rule resolves after its condition is clear this many "
          "steps in a row",
          at_least(1), not_fingerprinted);
  v.field("flap_firings", c.flap_firings,
          "a rule firing this often within flap_window_steps is flapping: "
          "said once, firing until clear for the window",
          at_least(0, "0 = off"), not_fingerprinted);
  v.field("flap_window_steps", c.flap_window_steps,
          "the window of flap_firings, and the clear run that resolves a "
          "flapping rule",
          at_least(1), not_fingerprinted);
}

// What a model preset knows of its shape beyond model_config's keys, for
// `tutti plan` only (config/presets.cpp); 0 = as model_config says. Not a
// config key: training has none of these yet.
struct preset_shape {
  // Multi-head latent attention (DeepSeek-V3): low-rank query and KV, the
  // KV cache holding the latent and the rotary key only.
  int64_t q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
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
  elastic_config elastic;
  metrics_config metrics;
  alerts_config alerts;
  security_config security;
  std::string source_path; // the file it came from, for messages
  preset_shape preset;      // from a model preset, planning only

  int64_t ep_size() const { return cluster.ep_size; }
  // Ranks that split each layer's weights (tensor parallelism), pipeline
  // stages, and the ranks that see different tokens: world = pp_size *
  // dp_size * tp_size in Megatron's order, TP innermost and the stage
  // outermost: rank = (stage * dp + dp_rank) * tp + tp_rank. A TP group is
  // tp consecutive ranks, so it stays in a node (its NVLink domain) when
  // nproc_per_node is a multiple of tp; stage 0's ranks are a one-stage
  // layout's.
  int64_t tp_size() const { return cluster.tensor_model_parallel_size; }
  int64_t pp_size() const { return cluster.pipeline_model_parallel_size; }
  int64_t dp_size() const {
    return cluster.world_size / (tp_size() * pp_size());
  }
  int64_t rank_at(int64_t stage, int64_t dp_rank, int64_t tp_rank) const {
    return (stage * dp_size() + dp_rank) * tp_size() + tp_rank;
  }
  int64_t tp_rank_of(int64_t rank) const { return rank % tp_size(); }
  int64_t dp_rank_of(int64_t rank) const {
    return rank / tp_size() % dp_size();
  }
  int64_t pp_stage_of(int64_t rank) const {
    return rank / (dp_size() * tp_size());
  }
  // The EP group of a rank: ep_size data-parallel ranks of its stage and
  // TP index (dp_rank / ep * ep onwards). Its place in the group, and the
  // group's world ranks in member order.
  int64_t ep_member_of(int64_t rank) const {
    return ep_size() > 0 ? dp_rank_of(rank) % ep_size() : 0;
  }
  std::vector<int64_t> ep_group_of(int64_t rank) const {
    const int64_t ep = ep_size() > 0 ? ep_size() : 1;
    const int64_t first = dp_rank_of(rank) / ep * ep;
    std::vector<int64_t> out;
    for (int64_t m = 0; m < ep; ++m)
      out.push_back(rank_at(pp_stage_of(rank), first + m, tp_rank_of(rank)));
    return out;
  }
  // Layers of each pipeline stage, first to last: cluster_config's
  // pipeline_layers, or its first/last-stage counts with equal shares
  // between, or equal stages (as check_across_keys has checked).
  std::vector<int64_t> stage_layer_counts() const;
  // Layers of each model chunk in virtual-stage order (chunk c of stage s
  // is virtual stage c * pp + s): with pipeline_virtual_stages V, the P x V
  // counts pipeline_layers lists, or equal chunks; without, the stages'.
  std::vector<int64_t> chunk_layer_counts() const;
  int64_t experts_per_rank() const { return moe.num_experts / cluster.ep_size; }
  // A failed expert shard restarts in place (its rank replays the step's
  // expert work) unless its supervision allows no restart: then the shards
  // keep no second set of weights and moments and the ranks log no inputs,
  // and a shard failure is recovered from the last checkpoint instead.
  bool expert_restart_in_place() const {
    return supervision.expert_shard.max_restarts > 0
           && supervision.expert_shard.restart != restart_type::temporary;
  }
};

// The sections, in the order they are read and checked.
template <class Visitor>
void visit_fields(Visitor& v, job_config& c) {
  using namespace config;
  v.field("cluster_config", c.cluster, "the nodes, ranks and their links");
  v.field("model", c.model, "the transformer", required);
  v.field("moe_config", c.moe, "experts and routing", required);
  v.field("train", c.train, "optimiser and schedule", required);
  v.field("data", c.data, "the dataset", required);
  v.field("run", c.run, "where the run writes", required);
  v.field("checkpoint", c.checkpoint, "checkpoints and their retention");
  v.field("diag", c.diag, "the interconnect check");
  v.field("supervision", c.supervision, "restarts, per kind of child");
  v.field("recovery", c.recovery, "failure detection and recovery");
  v.field("elastic", c.elastic, "training on without lost nodes");
  v.field("metrics", c.metrics, "the Prometheus endpoint");
  v.field("alerts", c.alerts, "alert rules (0 turns a rule off)");
  v.field("security", c.security, "mutual TLS, roles and audit");
}

// Loads and validates: the config, or a status whose message is one line
// naming the key and why. Relative paths in data.dir and run.dir are kept
// as written (relative to the working directory).
expected<job_config> load_job_config(const std::string& path);
expected<job_config> parse_job_config(const std::string& yaml_text,
                                      const std::string& source_name);
// The checks across keys that loading runs, for a config made in code
// (a layout derived from a loaded one).
status check_job_config(const job_config& c);

// The config as "section.key" = value pairs, every key not declared
// not_fingerprinted: what every node of a job must agree on. Its text
// identifies the config; comparing two texts names the first key that
// differs.
std::vector<std::pair<std::string, std::string>> config_fingerprint(
  const job_config& c);
std::string fingerprint_text(const job_config& c);

// Every key, not_fingerprinted ones included, as config_fingerprint writes
// them: what a config version records and its diff compares.
std::vector<std::pair<std::string, std::string>> config_values(
  const job_config& c);

// The first differing key of two fingerprints ("" if equal), as
// "model.hidden_size: 64 here, 128 there".
std::string first_difference(const std::string& ours,
                             const std::string& theirs);

} // namespace tutti
