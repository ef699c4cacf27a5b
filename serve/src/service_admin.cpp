#include "tutti/serve/service_admin.hpp"
#include "tutti/base/whole_number.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tutti/runtime/log.hpp"

namespace tutti::serve {

namespace {

using json = nlohmann::ordered_json;

admin_answer answer(json body) {
  body["ok"] = true;
  return {200, body.dump(-1, ' ', false, json::error_handler_t::replace)};
}

admin_answer refuse(const std::string& why) {
  return {400, json{{"ok", false}, {"error", why}}.dump()};
}

bool read_whole_number(const std::string& text, int64_t& out) {
  const auto value = tutti::whole_number(text);
  if (value)
    out = *value;
  return value.has_value();
}

const char* what_a_service_answers =
  "a service (tutti serve) answers status, actors, metrics [NAME], logs and "
  "kill|restart expert_shard/R";

json status_of(const admin_context& at) {
  auto& svc = *at.svc;
  const auto g = svc.metrics().gauges();
  const auto t = svc.metrics().totals();
  int64_t shards = 0, up = 0, restarts = g.expert_shard_restarts;
  if (auto* ranks = svc.ranks()) {
    shards = ranks->size();
    const auto states = ranks->shard_states();
    int64_t by_supervisor = 0;
    for (const auto& s : states) {
      up += s.running;
      by_supervisor += s.restarts;
    }
    // The supervisor counts a restart at once; the ranks when they next
    // send the shard work.
    restarts = std::max(restarts, by_supervisor);
  }
  const double uptime = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - at.started)
                          .count();
  return {{"model", svc.model().name},
          {"address", at.address},
          {"ready", svc.shards_up()},
          {"uptime_s", std::round(uptime * 10) / 10},
          {"requests",
           {{"running", g.running},
            {"waiting", g.waiting},
            {"finished", t.finished},
            {"rejected", t.rejected},
            {"preempted", t.preemptions}}},
          {"kv_cache_blocks",
           {{"used", g.kv_used_blocks}, {"total", g.kv_total_blocks}}},
          {"expert_shards",
           {{"ranks", shards}, {"up", up}, {"restarts", restarts}}},
          {"tokens",
           {{"prompt", t.prompt_tokens}, {"generated", t.generation_tokens}}}};
}

json actors_of(service& svc) {
  json rows = json::array();
  if (auto* ranks = svc.ranks())
    for (const auto& s : ranks->shard_states())
      rows.push_back({{"path", s.id},
                      {"kind", "serve_expert_shard"},
                      {"state", s.running ? "running" : "down"},
                      {"restarts", s.restarts}});
  return rows;
}

// "expert_shard/R" into R.
bool shard_rank(const std::string& path, int64_t& rank) {
  const std::string prefix = "expert_shard/";
  return path.rfind(prefix, 0) == 0
         && read_whole_number(path.substr(prefix.size()), rank);
}

admin_answer kill_shard(service& svc, int64_t rank, const std::string& why) {
  auto* ranks = svc.ranks();
  if (!ranks)
    return refuse("this service runs no expert shards (its engine runs on "
                  "the scheduler's thread)");
  if (auto s = ranks->kill_shard(rank); !s.ok())
    return refuse(s.message());
  log_warn("service_admin", why + ": killed expert_shard/"
                              + std::to_string(rank)
                              + "; its supervisor restarts it");
  return answer({{"message", "killed expert_shard/" + std::to_string(rank)
                               + "; its supervisor restarts it and the "
                                 "requests in flight go on"}});
}

admin_answer logs_of(const std::vector<std::string>& args) {
  auto arg = [&](size_t i) { return i < args.size() ? args[i] : std::string(); };
  int64_t node = 0, lines = 200;
  if (!arg(0).empty() && (!read_whole_number(arg(0), node) || node != 0))
    return refuse("logs: a service is one node (0), got --node " + arg(0));
  if (!arg(2).empty() && (!read_whole_number(arg(2), lines) || lines < 1))
    return refuse("logs: --lines must be a number >= 1, got '" + arg(2) + "'");
  return answer(
    {{"lines", read_log_lines(arg(1).empty() ? "info" : arg(1), lines)}});
}

admin_answer metrics_of(service& svc, const std::string& name) {
  std::istringstream text(svc.metrics().render(svc.model().name));
  json lines = json::array();
  for (std::string line; std::getline(text, line);)
    if (name.empty() || line.find(name) != std::string::npos)
      lines.push_back(line);
  return answer({{"lines", lines}});
}

} // namespace

admin_answer admin_shell(const admin_context& at, const std::string& command,
                         const std::string& args_json) {
  auto& svc = *at.svc;
  std::vector<std::string> args;
  if (!args_json.empty()) {
    const auto parsed = json::parse(args_json, nullptr, false);
    if (!parsed.is_array())
      return refuse("args must be a JSON array of strings");
    for (const auto& a : parsed) {
      if (!a.is_string())
        return refuse("args must be a JSON array of strings");
      args.push_back(a.get<std::string>());
    }
  }
  if (command == "status")
    return answer({{"status", status_of(at)}});
  if (command == "actors")
    return answer({{"actors", actors_of(svc)}});
  if (command == "metrics")
    return metrics_of(svc, args.empty() ? std::string() : args[0]);
  if (command == "logs")
    return logs_of(args);
  if (command == "kill" || command == "restart") {
    int64_t rank = -1;
    const auto path = args.empty() ? std::string() : args[0];
    if (!shard_rank(path, rank))
      return refuse(command + ": no actor '" + path
                    + "' (a service's are expert_shard/R; try actors)");
    return kill_shard(svc, rank, "shell " + command);
  }
  return refuse(command + ": not available on a service; "
                + what_a_service_answers);
}

admin_answer admin_chaos(const admin_context& at, const std::string& fault,
                         int64_t rank) {
  auto& svc = *at.svc;
  if (fault != "kill_expert" && fault != "raise_expert")
    return refuse(fault + ": not available on a service (tutti serve takes "
                          "kill_expert and raise_expert --rank R)");
  if (fault == "kill_expert")
    return kill_shard(svc, rank, "chaos kill_expert");
  auto* ranks = svc.ranks();
  if (!ranks)
    return refuse("this service runs no expert shards");
  if (auto s = ranks->inject_fault(rank, "raise_expert"); !s.ok())
    return refuse(s.message());
  log_warn("service_admin", "chaos raise_expert: expert_shard/"
                              + std::to_string(rank)
                              + " fails on its next task");
  return answer({{"message", "raise_expert on rank " + std::to_string(rank)
                               + ": its shard fails on its next task and "
                                 "is restarted"}});
}

} // namespace tutti::serve
