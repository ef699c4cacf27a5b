#include "tutti/security/api_keys.hpp"

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

namespace tutti::security {

namespace {

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

} // namespace

std::string sha256_hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &n, EVP_sha256(), nullptr)
      != 1)
    return "";
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

expected<std::shared_ptr<api_keys>> api_keys::load(const std::string& path) {
  auto out = std::make_shared<api_keys>();
  try {
    const YAML::Node root = YAML::LoadFile(path);
    if (!root.IsMap())
      return status::error(path + ": must be a mapping with keys:");
    for (const auto& entry : root) {
      const auto key = entry.first.as<std::string>();
      if (key != "rate_per_minute" && key != "keys")
        return status::error(path + ": " + key + ": unknown key");
    }
    const double default_rate = root["rate_per_minute"]
                                  ? root["rate_per_minute"].as<double>()
                                  : 600;
    if (!(default_rate > 0))
      return status::error(path + ": rate_per_minute must be > 0");
    const auto keys = root["keys"];
    if (!keys || !keys.IsMap() || keys.size() == 0)
      return status::error(path + ": keys must map names to SHA-256 hashes");
    const auto now = std::chrono::steady_clock::now();
    for (const auto& entry : keys) {
      bucket b;
      b.name = entry.first.as<std::string>();
      b.rate_per_minute = default_rate;
      std::string hash;
      if (entry.second.IsScalar()) {
        hash = entry.second.as<std::string>();
      } else if (entry.second.IsMap()) {
        for (const auto& field : entry.second) {
          const auto f = field.first.as<std::string>();
          if (f != "sha256" && f != "rate_per_minute")
            return status::error(path + ": keys." + b.name + "." + f
                                 + ": unknown key");
        }
        if (entry.second["sha256"])
          hash = entry.second["sha256"].as<std::string>();
        if (entry.second["rate_per_minute"])
          b.rate_per_minute = entry.second["rate_per_minute"].as<double>();
      }
      if (!is_sha256_hex(hash))
        return status::error(path + ": keys." + b.name
                             + ": not a SHA-256 hash (64 lowercase hex "
                               "digits; the key itself is never stored)");
      if (!(b.rate_per_minute > 0))
        return status::error(path + ": keys." + b.name
                             + ".rate_per_minute must be > 0");
      b.tokens = b.rate_per_minute;
      b.refilled = now;
      if (!out->by_hash_.emplace(hash, b).second)
        return status::error(path + ": keys." + b.name
                             + ": the same hash as another key");
    }
  } catch (const YAML::Exception& ex) {
    return status::error(path + ": " + ex.what());
  }
  return out;
}

api_key_verdict api_keys::check(const std::string& authorization) {
  api_key_verdict v;
  const std::string scheme = "Bearer ";
  if (authorization.size() <= scheme.size() || authorization.size() > 4096
      || authorization.compare(0, scheme.size(), scheme) != 0)
    return v;
  const auto hash = sha256_hex(authorization.substr(scheme.size()));
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = by_hash_.find(hash);
  if (found == by_hash_.end())
    return v;
  auto& b = found->second;
  v.key_name = b.name;
  const auto now = std::chrono::steady_clock::now();
  const double per_second = b.rate_per_minute / 60;
  b.tokens = std::min(
    b.rate_per_minute,
    b.tokens
      + per_second * std::chrono::duration<double>(now - b.refilled).count());
  b.refilled = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    v.http_status = 200;
    return v;
  }
  v.http_status = 429;
  v.retry_after_s = std::max(
    1, static_cast<int>(std::ceil((1 - b.tokens) / per_second)));
  return v;
}

} // namespace tutti::security
