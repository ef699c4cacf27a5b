// rank_setup.hpp: the rank's device and communicators.

#include "rank/rank_setup.hpp"

#include <algorithm>
#include <utility>

#include "tutti/runtime/rendezvous.hpp"
#include "tutti/comm/gloo_communicator.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/comm/nccl_communicator.hpp"
#include "tutti/elastic/replica_peers.hpp"
#include "tutti/kernels/device_memory.hpp"
#include "tutti/train/expert_ffn.hpp"
#include "tutti/train/idle_core_pool.hpp"

namespace tutti {

// Rendezvous groups are named by epoch: a rebuilt communicator never
// meets keys of the one it replaces. Gloo or NCCL by the config; NCCL's
// unique id travels through the same coordinator store.
status connect(caf::actor_system& sys, const rank_args& a, int device,
               rank_comms& out) {
  const auto& cl = a.cfg.cluster;
  const auto timeout = std::chrono::milliseconds(cl.collective_timeout_ms);
  const auto rendezvous = std::chrono::milliseconds(
    a.cfg.recovery.rendezvous_timeout_ms);
  actor_store store(sys, a.coordinator, rendezvous);
  const auto epoch = "e" + std::to_string(a.epoch) + "/";
  // Bind the data plane to this node's own address (nodes[N].host).
  const auto host = cl.node(a.rank / cl.nproc_per_node).host;
  // `first` and `stride` give the group's global ranks: first + i * stride.
  auto in_process = [&](int first, int size, int stride) {
    if (!a.memory_hub || cl.local_transport != local_transport_kind::memory)
      return false;
    for (int i = 0; i < size; ++i)
      if (!a.memory_hub->hosts(first + i * stride))
        return false;
    return true;
  };
  // `lends`: the group of the MoE exchange, whose members wait for the
  // busiest expert shard; they compute its tiles meanwhile. `host_memory`:
  // the data lives in host memory (never NCCL).
  auto make = [&](int member, int size, const std::string& group, int first,
                  int stride, std::unique_ptr<comm::communicator>& c,
                  bool lends = false, bool host_memory = false) -> status {
    if (cl.backend() == backend_kind::nccl && !host_memory) {
      comm::nccl_options opts;
      opts.group = epoch + group;
      opts.device = device;
      opts.timeout = timeout;
      std::unique_ptr<comm::nccl_communicator> nccl;
      TUTTI_RETURN_IF_ERROR(
        comm::make_nccl_communicator(store, member, size, opts, nccl));
      c = std::move(nccl);
    } else if (in_process(first, size, stride)) {
      comm::memory_options opts{epoch + group, timeout, rendezvous, {}};
      // A rank waiting for its peers computes a busier shard's tiles.
      if (lends && train::shares_expert_tiles(a.cfg, device))
        opts.while_waiting = [](double& ran_s) {
          return train::idle_core_pool::process().help_one(&ran_s);
        };
      TUTTI_RETURN_IF_ERROR(
        comm::make_memory_communicator(*a.memory_hub, member, size, opts, c));
    } else {
      comm::gloo_options opts{host, epoch + group, timeout, rendezvous, {}};
      // A secured cluster also refuses data-plane connections from
      // addresses that are not its nodes'.
      if (a.cfg.security.tls_on())
        for (int64_t n = 0; n < cl.nnodes; ++n)
          opts.members.push_back(cl.node(n).host);
      TUTTI_RETURN_IF_ERROR(
        comm::make_gloo_communicator(store, member, size, opts, c));
    }
    a.control->add(c.get());
    return {};
  };
  const int world = static_cast<int>(cl.world_size);
  const int ep = static_cast<int>(a.cfg.ep_size());
  const int dp = static_cast<int>(a.cfg.dp_size());
  const int tp = static_cast<int>(a.cfg.tp_size());
  const int pp = static_cast<int>(a.cfg.pp_size());
  // rank = (stage * dp + dp_rank) * tp + tp_rank (job_config): `block`
  // (stage * dp + dp_rank) names a TP group, `lane` (stage * tp + tp_rank)
  // the data-parallel ranks of one stage and TP index, `across` (dp_rank *
  // tp + tp_rank) a rank's place within its stage.
  const auto& cfg = a.cfg;
  const int stage = static_cast<int>(cfg.pp_stage_of(a.rank));
  const int dp_rank = static_cast<int>(cfg.dp_rank_of(a.rank));
  const int tp_rank = static_cast<int>(cfg.tp_rank_of(a.rank));
  const int block = stage * dp + dp_rank, lane = stage * tp + tp_rank;
  const int across = dp_rank * tp + tp_rank;
  auto rank_at = [&](int dp_index) {
    return static_cast<int>(cfg.rank_at(stage, dp_index, tp_rank));
  };
  // The MoE exchange runs on the EP group: the data-parallel group (the
  // world without TP and PP) where ep_size is the dp size, else its own.
  const bool moe_on_dp = ep == dp, own_dp = tp > 1 || pp > 1;
  TUTTI_RETURN_IF_ERROR(make(a.rank, world, "world", 0, 1, out.world,
                             moe_on_dp && !own_dp));
  if (own_dp) // this stage's ranks of this TP index, tp apart
    TUTTI_RETURN_IF_ERROR(make(dp_rank, dp, "dp" + std::to_string(lane),
                               rank_at(0), tp, out.dp, moe_on_dp));
  if (tp > 1) // this stage's ranks of this dp index, consecutive
    TUTTI_RETURN_IF_ERROR(make(tp_rank, tp, "tp" + std::to_string(block),
                               block * tp, 1, out.tp));
  if (pp > 1) {
    // All stages of this dp and TP index (for the step's sums), tp * dp
    // apart, and the two-member links to the neighbouring stages
    // (activations and their gradients).
    const int stride = tp * dp;
    const auto tail = std::to_string(across);
    TUTTI_RETURN_IF_ERROR(
      make(stage, pp, "pp" + tail, across, stride, out.pp));
    for (int b = std::max(0, stage - 1); b <= std::min(stage, pp - 2); ++b)
      TUTTI_RETURN_IF_ERROR(make(stage - b, 2,
                                 "pplink" + std::to_string(b) + "." + tail,
                                 b * stride + across, stride,
                                 b < stage ? out.prev : out.next));
  }
  if (cfg.elastic.replica_interval_steps > 0 && a.replicas
      && elastic::replica_shift(cfg) != 0) {
    // One link per copy, named by the rank whose state it carries. Every
    // rank joins its two in the order of those names, so the pairs form
    // one after another instead of each waiting on the next in a ring.
    const int to = static_cast<int>(elastic::replica_target(cfg, a.rank));
    const int from = static_cast<int>(elastic::replica_source(cfg, a.rank));
    auto link_out = [&] {
      return make(0, 2, "replica" + std::to_string(a.rank), a.rank,
                  to - a.rank, out.replica_out, false, /*host_memory=*/true);
    };
    auto link_in = [&] {
      return make(1, 2, "replica" + std::to_string(from), from, a.rank - from,
                  out.replica_in, false, /*host_memory=*/true);
    };
    TUTTI_RETURN_IF_ERROR(a.rank < from ? link_out() : link_in());
    TUTTI_RETURN_IF_ERROR(a.rank < from ? link_in() : link_out());
  }
  if (ep < dp) {
    // Blocks of ep consecutive dp indices of one stage and TP index
    // (job_config::ep_group_of), and the ranks holding the same experts
    // across those blocks.
    const auto name = std::to_string(lane) + ".";
    TUTTI_RETURN_IF_ERROR(make(dp_rank % ep, ep,
                               "ep" + name + std::to_string(dp_rank / ep),
                               rank_at(dp_rank / ep * ep), tp, out.ep, true));
    TUTTI_RETURN_IF_ERROR(make(dp_rank / ep, dp / ep,
                               "edp" + name + std::to_string(dp_rank % ep),
                               rank_at(dp_rank % ep), ep * tp,
                               out.expert_dp));
  }
  return {};
}

int rank_device(const job_config& cfg, int32_t rank) {
  if (cfg.cluster.device != compute_device::cuda)
    return -1;
  const int count = kernels::cuda_device_count();
  const auto local = rank % cfg.cluster.nproc_per_node;
  return count > 0 ? static_cast<int>(local % count) : 0;
}

kernels::gemm_precision gemm_precision_of(const job_config& cfg) {
  return cfg.train.gemm_precision == gemm_precision::bf16
           ? kernels::gemm_precision::bf16
           : kernels::gemm_precision::fp32;
}

status check_rank_device(const job_config& cfg) {
  const auto& cl = cfg.cluster;
  // tutti plan counts bf16 training state; the engine stores the moments
  // in bf16 (adam_moments.hpp) and the rest in fp32 only.
  const auto& p = cfg.train.precision;
  for (const auto& [key, dtype] :
       {std::pair{"params", p.params}, std::pair{"grads", p.grads},
        std::pair{"master_weights", p.master_weights}})
    if (dtype != storage_dtype::fp32)
      return status::error(std::string("train.precision.") + key + ": "
                           + to_string(dtype)
                           + " is planned (tutti plan) but not run on "
                           + "cluster_config.device "
                           + to_string(cl.device)
                           + " yet: training stores parameters, gradients "
                             "and master weights in fp32");
  if (cl.backend() == backend_kind::other)
    return status::error("cluster_config.communication_backend: '"
                         + cl.communication_backend
                         + "' is not available (gloo, nccl)");
  if (cl.backend() == backend_kind::nccl)
    TUTTI_RETURN_IF_ERROR(comm::nccl_built().with_context(
      "cluster_config.communication_backend: nccl: "));
  if (cl.device == compute_device::cuda)
    TUTTI_RETURN_IF_ERROR(kernels::cuda_device_available().with_context(
      "cluster_config.device: cuda: "));
  // NCCL refuses two members of one communicator on the same GPU.
  if (cl.backend() == backend_kind::nccl
      && cl.nproc_per_node > kernels::cuda_device_count())
    return status::error(
      "cluster_config.nproc_per_node: " + std::to_string(cl.nproc_per_node)
      + " ranks per node but " + std::to_string(kernels::cuda_device_count())
      + " GPUs here; nccl needs one GPU per rank (gloo can share)");
  return {};
}

} // namespace tutti
