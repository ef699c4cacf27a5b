#pragma once
// Shared by the gateway tests: replicas of `tutti serve` as child
// processes on loopback ports, serve configs for tiny random models, and
// one completion through a real HTTP client with what came back (status,
// whole stream or an error event, which replica and version answered).

#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "daemon_support.hpp"
#include "serve_test_support.hpp"

namespace tutti::testing {

// The tiny model of the gateway tests (1 layer, 2 experts).
inline job_config gateway_model_config() {
  return serve_test_config(64, 16, 32, 1, 2, 1, 2, 1, 128);
}

// An export of gateway_model_config; `broken`: lm_head all NaN, so every
// request fails with "non-finite logits" (a deliberately broken version).
inline std::filesystem::path gateway_model(const std::filesystem::path& dir,
                                           uint64_t seed,
                                           bool broken = false) {
  auto cfg = gateway_model_config();
  auto t = random_model_tensors(cfg, seed);
  if (broken)
    for (auto& v : t.at("lm_head.weight"))
      v = std::nanf("");
  write_export_dir(dir, cfg, t);
  return dir;
}

inline std::filesystem::path serve_config_file(
  const std::filesystem::path& file, const std::filesystem::path& model,
  const std::string& extra = "") {
  write_text(file, "serve:\n  model: " + model.string()
                     + "\n  max_sequences: 8\n  max_batch_tokens: 256\n"
                       "  max_queue: 64\n  ep_size: 1\n"
                     + extra);
  return file;
}

// `tutti serve CONFIG --listen 127.0.0.1:PORT`, restartable on its port.
struct serve_replica {
  std::filesystem::path config, log;
  int port = 0;
  std::unique_ptr<child_process> process;

  void start() {
    process.reset();
    process = std::make_unique<child_process>(
      std::vector<std::string>{tutti_bin(), "serve", config.string(),
                               "--listen",
                               "127.0.0.1:" + std::to_string(port)},
      log);
  }
  bool wait_listening(double seconds) {
    return wait_until(
      [&] { return read_text(log).find("on http://") != std::string::npos; },
      seconds);
  }
  void kill9() { process->signal(SIGKILL), process->wait(10); }
};

struct completion_result {
  int status = 0;          // 0: no HTTP answer at all
  std::string body;        // the JSON, or the whole event stream
  bool complete = false;   // 200 and (stream) ended with [DONE], no error
  bool error_event = false; // a stream that ended with an error event
  std::string replica, version;
};

inline completion_result complete(int port, bool stream, int max_tokens,
                                  int timeout_s = 60,
                                  const std::string& key = "") {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(timeout_s, 0);
  c.set_write_timeout(timeout_s, 0);
  httplib::Headers h;
  if (!key.empty())
    h.emplace("Authorization", "Bearer " + key);
  const std::string body =
    std::string(R"({"prompt":[3,1,4,1,5,9,2,6],"max_tokens":)")
    + std::to_string(max_tokens) + R"(,"temperature":0,"stream":)"
    + (stream ? "true" : "false") + "}";
  completion_result out;
  auto r = c.Post("/v1/completions", h, body, "application/json");
  if (!r)
    return out;
  out.status = r->status;
  out.body = r->body;
  out.replica = r->get_header_value("X-Tutti-Replica");
  out.version = r->get_header_value("X-Tutti-Version");
  out.error_event = stream && r->body.find("\"error\"") != std::string::npos;
  out.complete = r->status == 200
                 && (!stream
                     || (r->body.find("data: [DONE]") != std::string::npos
                         && !out.error_event));
  return out;
}

} // namespace tutti::testing
