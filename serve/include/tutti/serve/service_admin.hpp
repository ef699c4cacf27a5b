#pragma once
// What a service (`tutti serve`) answers to the client commands a training
// job's daemons answer — `tutti status`, `tutti shell`, `tutti logs` and
// `tutti chaos` with the serve config as target — through the HTTP front's
// loopback-only admin endpoints (http_front.cpp): POST /admin/shell
// (form fields command, and args as a JSON array of strings) and POST
// /admin/chaos (fault, rank). Answers are JSON objects: {"ok": true, and one of "status", "lines", "actors", "message"}
// or {"ok": false, "error": "one line"} (HTTP 400). A service answers
// status, actors, metrics [NAME], logs, and kill|restart expert_shard/R;
// chaos kill_expert and raise_expert. Everything else (config history,
// pause, checkpoint, ...) is a training job's and is refused in one line.

#include <chrono>
#include <string>
#include <vector>

#include "tutti/serve/service.hpp"

namespace tutti::serve {

struct admin_answer {
  int http_status = 200;
  std::string body; // JSON
};

struct admin_context {
  service* svc = nullptr;
  std::string address; // the front's host:port
  std::chrono::steady_clock::time_point started;
};

// `args_json`: the command's arguments as a JSON array of strings.
admin_answer admin_shell(const admin_context& at, const std::string& command,
                         const std::string& args_json);
admin_answer admin_chaos(const admin_context& at, const std::string& fault,
                         int64_t rank);

} // namespace tutti::serve
