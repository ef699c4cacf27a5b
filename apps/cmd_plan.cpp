// tutti plan CONFIG [--json]: memory, compute and traffic per rank.

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/model/capacity_plan.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::cli {

namespace {

// Bytes as whole numbers, as an operator reads them.
int64_t whole(double bytes) {
  return static_cast<int64_t>(std::llround(bytes));
}

std::string plan_json(const model::capacity_plan& p) {
  nlohmann::ordered_json j;
  j["dense_params"] = p.dense_params;
  j["expert_params_total"] = p.expert_params_total;
  j["expert_params_per_rank"] = p.expert_params_per_rank;
  j["active_params_per_token"] = p.active_params_per_token;
  j["weights_bytes"] = whole(p.weights_bytes);
  j["grads_bytes"] = whole(p.grads_bytes);
  j["optimizer_bytes"] = whole(p.optimizer_bytes);
  j["activation_bytes"] = whole(p.activation_bytes);
  j["dispatch_buffer_bytes"] = whole(p.dispatch_buffer_bytes);
  j["total_bytes"] = whole(p.total_bytes);
  j["flops_per_token"] = p.flops_per_token;
  j["flops_per_step"] = p.flops_per_step;
  j["alltoall_bytes"] = whole(p.alltoall_bytes);
  j["alltoall_cross_node_bytes"] = whole(p.alltoall_cross_node_bytes);
  j["alltoall_cross_rack_bytes"] = whole(p.alltoall_cross_rack_bytes);
  j["allreduce_bytes"] = whole(p.allreduce_bytes);
  j["fits"] = p.warnings.empty();
  return j.dump();
}

} // namespace

int plan_command(const std::vector<std::string>& args) {
  command_line cl("plan", "CONFIG [--json]",
                  "memory, compute and traffic per rank; what does not fit, "
                  "with the key to change");
  cl.options()("json", "one JSON object instead of text");
  cl.positional("config");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("config"))
    return cl.bad("missing CONFIG (usage: tutti plan CONFIG)");
  auto loaded = load_job_config(vm["config"].as<std::string>());
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  const job_config& cfg = *loaded;
  auto p = model::make_capacity_plan(cfg);
  if (vm.count("json"))
    std::printf("%s\n", plan_json(p).c_str());
  else
    std::fputs(model::format_plan(cfg, p).c_str(), stdout);
  return 0;
}

} // namespace tutti::cli
