// tutti plan CONFIG [--json] [--model NAME] [--search]: memory by
// component, compute and traffic per rank; with --search, the layouts that
// fit device_memory_gb, fastest first.

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/train/capacity_plan.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/config/presets.hpp"
#include "tutti/train/memory_plan.hpp"

namespace tutti::cli {

namespace {

// Bytes as whole numbers, as an operator reads them.
int64_t whole(double bytes) {
  return static_cast<int64_t>(std::llround(bytes));
}

std::string plan_json(const train::capacity_plan& p) {
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
  const auto& m = p.memory;
  j["memory"] = {{"weights", whole(m.weights)},
                 {"gradients", whole(m.gradients)},
                 {"master_weights", whole(m.master_weights)},
                 {"optimizer", whole(m.optimizer)},
                 {"optimizer_scratch", whole(m.optimizer_scratch)},
                 {"activations_per_micro_batch", whole(m.activations_micro)},
                 {"attention_saved_per_layer",
                  whole(m.attention_saved_per_layer)},
                 {"attention_tiled", m.attention_tiled},
                 {"in_flight_micro_batches", m.in_flight},
                 {"activations", whole(m.activations)},
                 {"working", whole(m.working)},
                 {"dispatch", whole(m.dispatch)},
                 {"rows_half_again", whole(m.rows_half_again)},
                 {"checkpoint_host", whole(m.checkpoint)},
                 {"checkpoint_host_other_ranks", whole(m.checkpoint_other)},
                 {"checkpoint_host_all_other_ranks",
                  whole(m.checkpoint_others)},
                 {"replicas_host", whole(m.replicas)},
                 {"replicas_host_all_nodes", whole(m.replicas_all_nodes)},
                 {"kv_cache_per_sequence", whole(m.kv_cache_per_sequence)},
                 {"total", whole(m.total)},
                 {"total_all_stages", whole(m.total_all_stages)},
                 {"pipeline_stages", m.stages},
                 {"fullest_stage", m.fullest_stage}};
  return j.dump();
}

std::string seconds_text(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

int print_search(const job_config& cfg, const train::hardware& hw,
                 size_t top, bool json) {
  int64_t considered = 0;
  const auto found = train::search_layouts(cfg, hw, considered);
  if (json) {
    auto rows = nlohmann::ordered_json::array();
    for (size_t i = 0; i < found.size() && i < top; ++i) {
      const auto& c = found[i];
      rows.push_back({{"tp", c.layout.tp},
                      {"pp", c.layout.pp},
                      {"pipeline_layers", c.layout.stage_layers},
                      {"pipeline_virtual_stages", c.layout.virtual_stages},
                      {"ep", c.layout.ep},
                      {"dp", c.layout.dp},
                      {"micro_batches", c.layout.micro_batches},
                      {"recompute", to_string(c.layout.recompute)},
                      {"optimizer_sharding", c.layout.optimizer_sharding},
                      {"keep_expert_activations",
                       c.layout.keep_expert_activations},
                      {"memory_bytes", whole(c.memory.total)},
                      {"step_s", c.step.step_s},
                      {"compute_s", c.step.compute_s},
                      {"bubble", c.step.bubble},
                      {"exposed_comm_s", c.step.exposed_comm_s}});
    }
    nlohmann::ordered_json j;
    j["considered"] = considered;
    j["fit"] = found.size();
    j["layouts"] = rows;
    if (!found.empty())
      j["keys"] = train::layout_keys_text(cfg, found.front().layout);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("layouts for world %lld that fit %.0f GB per device: %zu of "
              "%lld considered; step time from %.0f TFLOP/s, %.0f Gb/s in a "
              "node, %.0f Gb/s between nodes\n",
              static_cast<long long>(cfg.cluster.world_size),
              cfg.cluster.device_memory_gb, found.size(),
              static_cast<long long>(considered), hw.device_tflops,
              hw.intra_node_gbps, hw.inter_node_gbps);
  std::printf("  %3s %3s %2s %4s %5s %4s %-14s %-7s %10s %10s %7s %10s\n",
              "TP", "PP", "V", "EP", "DP", "m", "recompute", "optim",
              "memory", "step", "bubble", "exposed");
  for (size_t i = 0; i < found.size() && i < top; ++i) {
    const auto& c = found[i];
    const auto& l = c.layout;
    std::printf("  %3lld %3lld %2lld %4lld %5lld %4lld %-14s %-7s %10s %10s "
                "%6.1f%% %10s\n",
                static_cast<long long>(l.tp), static_cast<long long>(l.pp),
                static_cast<long long>(l.virtual_stages),
                static_cast<long long>(l.ep), static_cast<long long>(l.dp),
                static_cast<long long>(l.micro_batches),
                (to_string(l.recompute)
                 + std::string(l.keep_expert_activations ? "+keep" : ""))
                  .c_str(),
                l.optimizer_sharding ? "sharded" : "whole",
                gib(c.memory.total).c_str(),
                seconds_text(c.step.step_s).c_str(), 100 * c.step.bubble,
                seconds_text(c.step.exposed_comm_s).c_str());
  }
  bool kept = false;
  for (size_t i = 0; i < found.size() && i < top; ++i)
    kept = kept || found[i].layout.keep_expert_activations;
  if (kept)
    std::printf("+keep: the experts' activations kept per micro-batch in "
                "flight (train.keep_expert_activations), none run again\n");
  if (cfg.expert_restart_in_place())
    std::printf("counted: the experts' second set and the replay log of "
                "restart in place (supervision.expert_shard.max_restarts: 0 "
                "drops them)\n");
  if (found.empty())
    std::printf("none fits: raise cluster_config.device_memory_gb or the "
                "world size, lower train.seq_len or "
                "train.global_batch_size%s\n",
                cfg.expert_restart_in_place()
                  ? ", or restart from checkpoints instead of in place "
                    "(supervision.expert_shard.max_restarts: 0)"
                  : "");
  else
    std::printf("fastest: %s (%s per rank); set %s\n",
                train::layout_text(found.front().layout).c_str(),
                gib(found.front().memory.total).c_str(),
                train::layout_keys_text(cfg, found.front().layout).c_str());
  return 0;
}

} // namespace

int plan_command(const std::vector<std::string>& args) {
  command_line cl("plan", "CONFIG [--json] [--model NAME] [--search]",
                  "memory, compute and traffic per rank; what does not fit, "
                  "with the key to change");
  cl.options()("json", "one JSON object instead of text")(
    "model", po::value<std::string>(),
    "a model preset: mixtral-8x7b, mixtral-8x22b, deepseek-v3, "
    "qwen3-30b-a3b or qwen3-235b-a22b")(
    "search", "list the layouts (TP, PP, EP, DP, micro-batches, "
              "recomputation, optimizer sharding) that fit, fastest first")(
    "top", po::value<size_t>()->default_value(15), "layouts --search lists")(
    "tflops", po::value<double>()->default_value(400),
    "sustained TFLOP/s per device for the step-time estimate");
  cl.required("config", "CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  const auto path = vm["config"].as<std::string>();
  std::ifstream in(path);
  if (!in)
    return fail(2, "config: " + path + ": cannot open config file");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> notes;
  auto loaded = parse_plan_config(
    text.str(), path,
    vm.count("model") ? vm["model"].as<std::string>() : std::string(), notes,
    vm.count("search") > 0);
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  const job_config& cfg = *loaded;
  const bool json = vm.count("json") > 0;
  if (!json)
    for (const auto& note : notes)
      std::printf("note: %s\n", note.c_str());
  if (vm.count("search"))
    return print_search(cfg,
                        train::hardware_of(cfg, vm["tflops"].as<double>()),
                        vm["top"].as<size_t>(), json);
  auto p = train::make_capacity_plan(cfg);
  if (json) {
    std::printf("%s\n", plan_json(p).c_str());
    return 0;
  }
  std::fputs(train::format_plan(cfg, p).c_str(), stdout);
  if (p.total_bytes > cfg.cluster.device_memory_gb * 1e9) {
    // The answer, not only the refusal: the layout that fits, if any.
    int64_t considered = 0;
    const auto found = train::search_layouts(
      cfg, train::hardware_of(cfg, vm["tflops"].as<double>()), considered);
    if (found.empty())
      std::printf("no layout of the %lld considered fits either\n",
                  static_cast<long long>(considered));
    else
      std::printf("fits: %s (%s per rank, the fastest of %zu that fit); "
                  "set %s\n",
                  train::layout_text(found.front().layout).c_str(),
                  gib(found.front().memory.total).c_str(), found.size(),
                  train::layout_keys_text(cfg, found.front().layout).c_str());
  }
  return 0;
}

} // namespace tutti::cli
