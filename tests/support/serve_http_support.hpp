#pragma once
// For tests that start `tutti serve` or serving daemons as processes: the
// serve section of their config, a client of the front on loopback, and
// readiness.

#include <httplib.h>

#include <filesystem>
#include <string>

namespace tutti::testing {

// A small replica's serve section on 127.0.0.1:http_port; `extra` adds
// keys (nodes, placement, ...).
inline std::string serve_yaml(const std::filesystem::path& model, int http_port,
                              const std::string& extra) {
  return "serve:\n  model: " + model.string()
         + "\n  listen: 127.0.0.1:" + std::to_string(http_port)
         + "\n  max_sequences: 8\n  max_batch_tokens: 64\n"
           "  kv_cache_bytes: 4MiB\n  step_timeout_s: 10\n"
         + extra;
}

inline httplib::Client local_client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  c.set_connection_timeout(2, 0);
  return c;
}

// GET /ready answers 200: the model is loaded and every shard is up.
inline bool serve_ready(int port) {
  auto r = local_client(port).Get("/ready");
  return r && r->status == 200;
}

} // namespace tutti::testing
