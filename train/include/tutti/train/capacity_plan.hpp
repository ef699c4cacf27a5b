#pragma once
// The capacity plan (`tutti plan`): per-rank memory, FLOPs and bytes on the
// wire for a config, from the model's formulas alone (no allocation), so it
// runs on a 10,000-GPU config in microseconds.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/train/memory_plan.hpp"

namespace tutti::train {

struct capacity_plan {
  // parameters
  int64_t dense_params = 0;        // replicated on every rank
  int64_t expert_params_total = 0; // all experts of all layers
  int64_t expert_params_per_rank = 0;
  int64_t active_params_per_token = 0;
  // bytes per rank
  double weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  double activation_bytes = 0; // kept activations, scratch, LM head
  double dispatch_buffer_bytes =
    0; // what communication_buffer_size: auto picks, the replay log
  double total_bytes = 0;
  memory_breakdown memory; // the same, component by component
  // compute
  double flops_per_token = 0; // forward + backward, active experts
  double flops_per_step = 0;  // global
  // wire, per rank per step
  double alltoall_bytes = 0; // dispatch + combine, forward + backward
  double alltoall_cross_node_bytes = 0;
  double alltoall_cross_rack_bytes = 0;
  double allreduce_bytes = 0; // gradient payload (ring moves 2(n-1)/n x)
  double allreduce_cross_node_bytes = 0;
  // what cannot fit, each with the key to change
  std::vector<std::string> warnings;
};

capacity_plan make_capacity_plan(const job_config& cfg);

// Rows the dispatch buffers must hold per rank per layer (receive side):
// with a capacity factor, experts_per_rank * capacity * ep_size; dropless,
// the worst case of every source sending all its rows here.
int64_t dispatch_buffer_rows(const job_config& cfg);

std::string format_plan(const job_config& cfg, const capacity_plan& plan);

} // namespace tutti::train
