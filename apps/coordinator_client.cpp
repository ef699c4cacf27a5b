#include "coordinator_client.hpp"

#include <caf/io/middleman.hpp>

#include <cstdio>
#include <filesystem>

#include "tutti/config/job_config.hpp"

namespace tutti::cli {

std::string connect_coordinator(caf::actor_system& sys,
                                const std::string& target,
                                coordinator_actor& out) {
  std::string host;
  int64_t port = 0;
  if (std::filesystem::is_regular_file(target)) {
    auto cfg = load_job_config(target);
    if (!cfg)
      return "config: " + cfg.message();
    host = cfg->cluster.coordinator_host();
    port = cfg->cluster.coordinator_port();
  } else {
    auto colon = target.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return "'" + target + "' is neither a config file nor HOST:PORT";
    host = target.substr(0, colon);
    try {
      size_t used = 0;
      port = std::stoll(target.substr(colon + 1), &used);
      if (used != target.size() - colon - 1)
        port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
    if (port <= 0 || port > 65535)
      return "'" + target + "': the port must be a number in 1..65535";
  }
  auto handle = sys.middleman().remote_actor<coordinator_actor>(
    host, static_cast<uint16_t>(port));
  if (!handle)
    return "cannot reach the coordinator at " + host + ":"
           + std::to_string(port) + ": " + sys.render(handle.error());
  out = *handle;
  return "";
}

std::string status_json(const job_status& s) {
  std::string nodes;
  for (auto n : s.nodes)
    nodes += (nodes.empty() ? "" : ",") + std::to_string(n);
  std::string message;
  for (char c : s.message) {
    if (c == '"' || c == '\\')
      message += '\\';
    if (static_cast<unsigned char>(c) >= 0x20)
      message += c;
  }
  char loss[40];
  std::snprintf(loss, sizeof(loss), "%.17g", s.loss);
  return "{\"state\":\"" + s.state + "\",\"step\":" + std::to_string(s.step)
         + ",\"steps\":" + std::to_string(s.steps)
         + ",\"epoch\":" + std::to_string(s.epoch)
         + ",\"last_checkpoint\":" + std::to_string(s.last_checkpoint)
         + ",\"loss\":" + loss + ",\"recoveries\":"
         + std::to_string(s.recoveries)
         + ",\"restarts\":" + std::to_string(s.restarts) + ",\"nodes\":["
         + nodes + "],\"message\":\"" + message + "\"}";
}

std::string status_text(const job_status& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "state       %s\nstep        %lld / %lld\nloss        %.4f\n"
                "checkpoint  step %lld\nepoch       %lld\n"
                "recoveries  %lld\nrestarts    %lld\nnodes       %zu "
                "connected\n",
                s.state.c_str(), static_cast<long long>(s.step),
                static_cast<long long>(s.steps), s.loss,
                static_cast<long long>(s.last_checkpoint),
                static_cast<long long>(s.epoch),
                static_cast<long long>(s.recoveries),
                static_cast<long long>(s.restarts), s.nodes.size());
  std::string out = buf;
  if (!s.message.empty())
    out += "message     " + s.message + "\n";
  return out;
}

} // namespace tutti::cli
