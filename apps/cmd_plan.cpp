// tutti plan CONFIG [--json]: memory, compute and traffic per rank.

#include <chrono>
#include <cstdio>

#include "commands.hpp"
#include "tutti/model/capacity_plan.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::cli {

int plan_command(const std::vector<std::string>& args) {
  std::string path;
  bool json = false;
  for (const auto& a : args) {
    if (a == "--json")
      json = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: tutti plan CONFIG [--json]\n");
      return 0;
    } else if (!a.empty() && a[0] == '-')
      return fail(2, "plan: unknown option '" + a + "'");
    else if (path.empty())
      path = a;
    else
      return fail(2, "plan: more than one config given");
  }
  if (path.empty())
    return fail(2, "plan: missing CONFIG (usage: tutti plan CONFIG)");
  auto loaded = load_job_config(path);
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  job_config cfg = std::move(*loaded);
  auto p = model::make_capacity_plan(cfg);
  if (json) {
    std::printf(
      "{\"dense_params\":%lld,\"expert_params_total\":%lld,"
      "\"expert_params_per_rank\":%lld,\"active_params_per_token\":%lld,"
      "\"weights_bytes\":%.0f,\"grads_bytes\":%.0f,\"optimizer_bytes\":%.0f,"
      "\"activation_bytes\":%.0f,\"dispatch_buffer_bytes\":%.0f,"
      "\"total_bytes\":%.0f,\"flops_per_token\":%.6g,\"flops_per_step\":%.6g,"
      "\"alltoall_bytes\":%.0f,\"alltoall_cross_node_bytes\":%.0f,"
      "\"alltoall_cross_rack_bytes\":%.0f,\"allreduce_bytes\":%.0f,"
      "\"fits\":%s}\n",
      static_cast<long long>(p.dense_params),
      static_cast<long long>(p.expert_params_total),
      static_cast<long long>(p.expert_params_per_rank),
      static_cast<long long>(p.active_params_per_token), p.weights_bytes,
      p.grads_bytes, p.optimizer_bytes, p.activation_bytes,
      p.dispatch_buffer_bytes, p.total_bytes, p.flops_per_token,
      p.flops_per_step, p.alltoall_bytes, p.alltoall_cross_node_bytes,
      p.alltoall_cross_rack_bytes, p.allreduce_bytes,
      p.warnings.empty() ? "true" : "false");
  } else {
    std::fputs(model::format_plan(cfg, p).c_str(), stdout);
  }
  return 0;
}

} // namespace tutti::cli
