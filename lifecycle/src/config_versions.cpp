#include "tutti/lifecycle/config_versions.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <sstream>

namespace tutti::lifecycle {

namespace {

std::map<std::string, std::string> parse_values(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos)
      out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

} // namespace

std::string who_am_i(const std::string& command) {
  std::string user;
  if (const auto* pw = getpwuid(geteuid()); pw != nullptr && pw->pw_name)
    user = pw->pw_name;
  else
    user = "uid " + std::to_string(geteuid());
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0)
    host[0] = '\0';
  return user + "@" + host + " (" + command + ")";
}

std::string values_text(const job_config& cfg) {
  std::string out;
  for (const auto& [key, value] : config_values(cfg))
    out += key + "=" + value + "\n";
  return out;
}

std::vector<std::string> diff_values(const std::string& from,
                                     const std::string& to) {
  const auto a = parse_values(from), b = parse_values(to);
  std::vector<std::string> out;
  auto shown = [](const std::map<std::string, std::string>& m,
                  const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? std::string("(absent)") : it->second;
  };
  std::map<std::string, bool> keys;
  for (const auto& [k, v] : a)
    keys[k] = true;
  for (const auto& [k, v] : b)
    keys[k] = true;
  for (const auto& [key, unused] : keys)
    if (shown(a, key) != shown(b, key))
      out.push_back(key + ": " + shown(a, key) + " -> " + shown(b, key));
  return out;
}

const std::vector<std::string>& shape_keys() {
  static const std::vector<std::string> keys = {
    "model.vocab_size",          "model.hidden_size",
    "model.intermediate_size",   "model.num_hidden_layers",
    "model.num_attention_heads", "model.num_key_value_heads",
    "moe_config.num_experts"};
  // Not the layout (world_size, ep_size, tensor_model_parallel_size):
  // checkpoints hold whole tensors, and a resume finds each expert in
  // whichever shard the checkpoint's own ep_size put it.
  return keys;
}

std::string shape_difference(const std::string& recorded,
                             const std::string& proposed,
                             const std::string& recorded_name) {
  const auto a = parse_values(recorded), b = parse_values(proposed);
  for (const auto& key : shape_keys()) {
    auto x = a.find(key), y = b.find(key);
    if (x == a.end() || y == b.end() || x->second == y->second)
      continue;
    return key + ": " + x->second + " in " + recorded_name + ", " + y->second
           + " in this config";
  }
  return "";
}

expected<std::vector<store::config_version_record>> history(
  store::job_store& db) {
  auto versions = db.config_versions();
  if (!versions || !versions->empty())
    return versions;
  // A job started before versions were kept: its spec is version 1.
  auto spec = db.job_spec();
  if (!spec)
    return spec.error();
  if (!*spec)
    return versions;
  store::config_version_record first;
  first.version = 1;
  first.who = "(before config versions)";
  first.reason = "start";
  first.config_yaml = (*spec)->second;
  if (auto cfg = parse_job_config(first.config_yaml, "the job spec"))
    first.values = values_text(*cfg);
  return std::vector<store::config_version_record>{first};
}

expected<int64_t> record_start(store::job_store& db, const job_config& cfg,
                               const std::string& config_yaml,
                               const std::string& who,
                               const std::string& reason) {
  auto stored = db.config_versions();
  if (!stored)
    return stored.error();
  auto versions = history(db);
  if (!versions)
    return versions.error();
  const auto values = values_text(cfg);
  store::config_version_record next;
  next.who = who;
  next.config_yaml = config_yaml;
  next.values = values;
  // Nothing stored yet: a first start (the job spec, if any, is this
  // config), unless a job from before versions existed changes now.
  if (stored->empty()
      && (versions->empty() || versions->front().values == values)) {
    next.version = 1;
    next.reason = reason.empty() ? "start" : reason;
  } else {
    const auto& last = versions->back();
    if (last.values == values && reason.empty())
      return last.version;
    if (auto key = shape_difference(last.values, values,
                                    "version " + std::to_string(last.version));
        !key.empty())
      return status::error(key
                           + ": the model's shape differs from the job's "
                             "(its checkpoints cannot be loaded); start "
                             "over with --fresh or use another run.dir");
    next.version = last.version + 1;
    next.reason = reason.empty() ? "change" : reason;
    std::string diff;
    for (const auto& line : diff_values(last.values, values))
      diff += line + "\n";
    next.diff = diff;
    if (stored->empty())
      TUTTI_RETURN_IF_ERROR(db.put_config_version(last)); // the old spec
  }
  TUTTI_RETURN_IF_ERROR(db.put_config_version(next));
  TUTTI_RETURN_IF_ERROR(db.put_job_spec(fingerprint_text(cfg), config_yaml));
  auto what = next.version == 1 ? std::string("version 1 (start)")
                                : "version " + std::to_string(next.version)
                                    + " (" + next.reason + "): "
                                    + std::to_string(std::count(
                                      next.diff.begin(), next.diff.end(), '\n'))
                                    + " key(s) changed";
  (void)db.append_event("config_version", what + " by " + who);
  return next.version;
}

expected<std::vector<std::string>> version_lines(
  store::job_store& db, const std::vector<std::string>& args) {
  auto all = history(db);
  if (!all)
    return all.error();
  std::vector<std::string> out;
  if (!args.empty() && args[0] == "history" && args.size() == 1) {
    for (const auto& v : *all) {
      out.push_back("version " + std::to_string(v.version) + "  "
                    + utc_text(v.time_unix_ms) + "  " + v.who + "  "
                    + v.reason);
      std::istringstream diff(v.diff);
      std::string line;
      while (std::getline(diff, line))
        out.push_back("    " + line);
    }
    if (out.empty())
      out.push_back("(no config versions)");
    return out;
  }
  if (args.size() != 3 || args[0] != "diff")
    return status::error("usage: config history | config diff V1 V2");
  const store::config_version_record* found[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    for (const auto& v : *all)
      if (std::to_string(v.version) == args[1 + i])
        found[i] = &v;
    if (!found[i])
      return status::error("no config version " + args[1 + i] + " (the job has "
                           + std::to_string(all->size()) + ")");
  }
  out = diff_values(found[0]->values, found[1]->values);
  if (out.empty())
    out.push_back("(versions " + args[1] + " and " + args[2]
                  + " are the same)");
  return out;
}

std::string utc_text(int64_t unix_ms) {
  if (unix_ms == 0)
    return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace tutti::lifecycle
