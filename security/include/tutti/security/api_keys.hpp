#pragma once
// API keys for an HTTP API: `Authorization: Bearer KEY`, checked against
// SHA-256 hashes of the keys (the keys themselves are never stored), each
// key with a request rate limit. The file (YAML):
//
//   rate_per_minute: 600    # the default for keys without their own
//   keys:
//     alice: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//     batch-job: {sha256: 60303ae2..., rate_per_minute: 60}
//
// A key's hash: `printf %s "$KEY" | sha256sum`.

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::security {

struct api_key_verdict {
  int http_status = 401; // 200 let through, 401 no or wrong key, 429 limit
  std::string key_name;  // whose key (200, 429)
  int retry_after_s = 0; // 429: when the next request would be let through
};

class api_keys {
public:
  // Reads and checks the file (hashes of 64 hex digits, rates > 0).
  static expected<std::shared_ptr<api_keys>> load(const std::string& path);

  // The request's Authorization header; counts it against the key's rate.
  api_key_verdict check(const std::string& authorization);

  // One key's allowance: a bucket of rate_per_minute requests refilled
  // continuously (a minute's worth may come at once).
  struct bucket {
    std::string name;
    double rate_per_minute = 0, tokens = 0;
    std::chrono::steady_clock::time_point refilled;
  };

private:
  std::mutex mutex_;
  std::map<std::string, bucket> by_hash_; // hex SHA-256 -> its bucket
};

// Hex SHA-256 of `text`.
std::string sha256_hex(const std::string& text);

} // namespace tutti::security
