#include "drill_plan.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <stdexcept>

namespace tutti::cli {

namespace {

const std::set<std::string> in_place{"kill_expert", "raise_expert",
                                     "nan_expert",  "kill_loader",
                                     "kill_writer", "crash_checkpoint"};
const std::set<std::string> job_level{"kill_rank", "hang_rank", "kill_daemon"};

// A refused drill file, caught in load_drill_plan: what() is one line.
struct drill_refusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw drill_refusal(key + ": " + why);
}

template <class T>
T scalar(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar())
    refuse(key, "expected a single value");
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    refuse(key, "wrong type ('" + n.Scalar() + "')");
  }
}

drill_fault read_fault(const YAML::Node& item, const std::string& where,
                       const job_config& job) {
  if (!item.IsMap())
    refuse(where, "expected a mapping {fault, rank|node, at_step}");
  drill_fault f;
  for (const auto& kv : item) {
    const auto key = kv.first.Scalar();
    const auto path = where + "." + key;
    if (key == "fault")
      f.fault = scalar<std::string>(kv.second, path);
    else if (key == "rank")
      f.rank = scalar<int64_t>(kv.second, path);
    else if (key == "node")
      f.node = scalar<int64_t>(kv.second, path);
    else if (key == "nodes") {
      if (!kv.second.IsSequence() || kv.second.size() == 0)
        refuse(path, "expected a non-empty list of nodes");
      for (size_t i = 0; i < kv.second.size(); ++i)
        f.nodes.push_back(
          scalar<int64_t>(kv.second[i], path + "[" + std::to_string(i) + "]"));
    } else if (key == "during_checkpoint")
      f.during_checkpoint = scalar<bool>(kv.second, path);
    else if (key == "at_step")
      f.at_step = scalar<int64_t>(kv.second, path);
    else if (key == "restart_after_s")
      f.restart_after_s = scalar<double>(kv.second, path);
    else
      refuse(path, "unknown key");
  }
  if (!in_place.count(f.fault) && !job_level.count(f.fault))
    refuse(where + ".fault",
           "'" + f.fault
             + "' is not a drill fault (kill_expert raise_expert nan_expert "
               "kill_loader kill_writer crash_checkpoint kill_rank hang_rank "
               "kill_daemon)");
  const auto& cl = job.cluster;
  if (!f.nodes.empty()) {
    if (f.fault != "kill_daemon")
      refuse(where + ".nodes", "only kill_daemon takes several nodes");
    if (f.node >= 0)
      refuse(where + ".nodes", "give node or nodes, not both");
    std::set<int64_t> seen;
    for (auto n : f.nodes) {
      if (n < 1 || n >= cl.nnodes)
        refuse(where + ".nodes", "each must be in 1.."
                                   + std::to_string(cl.nnodes - 1)
                                   + " (node 0's loss is a fault of its own)");
      if (!seen.insert(n).second)
        refuse(where + ".nodes", "node " + std::to_string(n) + " twice");
    }
    f.node = f.nodes.front();
  } else if (f.fault == "kill_daemon") {
    f.nodes = {f.node};
  }
  if (f.during_checkpoint
      && (f.fault != "kill_daemon" || job.checkpoint.interval_steps <= 0))
    refuse(where + ".during_checkpoint",
           "only for kill_daemon, in a job with checkpoint.interval_steps");
  const bool on_node = f.fault == "kill_daemon" || f.fault == "kill_writer"
                       || f.fault == "crash_checkpoint";
  if (on_node && (f.node < 0 || f.node >= cl.nnodes))
    refuse(where + ".node",
           "needs a node in 0.." + std::to_string(cl.nnodes - 1));
  if (!on_node && (f.rank < 0 || f.rank >= cl.world_size))
    refuse(where + ".rank",
           "needs a rank in 0.." + std::to_string(cl.world_size - 1));
  if (f.at_step < 1 || f.at_step >= job.train.steps)
    refuse(where + ".at_step",
           "must be in 1.." + std::to_string(job.train.steps - 1));
  if (!(f.restart_after_s >= 0 && f.restart_after_s < 3600))
    refuse(where + ".restart_after_s", "must be in [0, 3600) seconds");
  return f;
}

} // namespace

bool recovered_in_place(const std::string& fault) {
  return in_place.count(fault) > 0;
}

namespace {

drill_plan read_drill_plan(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    refuse(path, "cannot open drill file");
  } catch (const YAML::Exception& ex) {
    refuse(path, "not YAML (line " + std::to_string(ex.mark.line + 1) + ")");
  }
  if (!root.IsMap())
    refuse(path, "expected a mapping with config and faults");
  drill_plan plan;
  for (const auto& kv : root) {
    const auto key = kv.first.Scalar();
    if (key != "config" && key != "faults" && key != "step_timeout_s")
      refuse(key, "unknown key");
  }
  if (!root["config"])
    refuse("config", "missing (the job's config file)");
  auto config = std::filesystem::path(
    scalar<std::string>(root["config"], "config"));
  if (config.is_relative())
    config = std::filesystem::absolute(path).parent_path() / config;
  plan.config_path = config.lexically_normal().string();
  auto job = load_job_config(plan.config_path);
  if (!job)
    throw drill_refusal(job.message());
  plan.job = std::move(*job);
  if (root["step_timeout_s"])
    plan.step_timeout_s = scalar<double>(root["step_timeout_s"],
                                         "step_timeout_s");
  if (!(plan.step_timeout_s > 0 && plan.step_timeout_s < 86400))
    refuse("step_timeout_s", "must be in (0, 86400) seconds");
  auto faults = root["faults"];
  if (!faults || !faults.IsSequence() || faults.size() == 0)
    refuse("faults", "expected a non-empty list");
  int64_t last = 0;
  for (size_t i = 0; i < faults.size(); ++i) {
    auto where = "faults[" + std::to_string(i) + "]";
    plan.faults.push_back(read_fault(faults[i], where, plan.job));
    if (plan.faults.back().at_step <= last)
      refuse(where + ".at_step", "must come after the previous fault's");
    last = plan.faults.back().at_step;
  }
  return plan;
}

} // namespace

expected<drill_plan> load_drill_plan(const std::string& path) {
  try {
    return read_drill_plan(path);
  } catch (const drill_refusal& ex) {
    return status::error(ex.what());
  }
}

} // namespace tutti::cli
