#include "tutti/serve/config_fields.hpp"

namespace tutti::serve {

status refuse(const std::string& key, const std::string& why) {
  return status::error(key + ": " + why);
}

// Keys of `map` must be among `known`; `prefix` names the mapping.
status check_keys(const YAML::Node& map, const std::string& prefix,
                  const std::set<std::string>& known) {
  if (!map.IsMap())
    return refuse(prefix.empty() ? "config"
                                 : prefix.substr(0, prefix.size() - 1),
                  "must be a mapping");
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const auto key = kv.first.Scalar();
    if (!seen.insert(key).second)
      return refuse(prefix + key, "duplicate key");
    if (!known.count(key))
      return refuse(prefix + key, "unknown key");
  }
  return {};
}

status read_int(const YAML::Node& map, const std::string& prefix,
                const char* key, int64_t& out, int64_t min) {
  if (!map[key])
    return {};
  const auto& v = map[key];
  const auto text = v.IsScalar() ? v.Scalar() : std::string();
  int64_t value = 0;
  size_t used = 0;
  try {
    value = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  if (text.empty() || used != text.size())
    return refuse(prefix + key, "must be a whole number, got '" + text + "'");
  if (value < min)
    return refuse(prefix + key, "must be >= " + std::to_string(min));
  out = value;
  return {};
}

// Bytes as a whole number or with a KiB/MiB/GiB suffix.
status read_bytes(const YAML::Node& map, const std::string& prefix,
                  const char* key, int64_t& out) {
  if (!map[key])
    return {};
  const auto text = map[key].IsScalar() ? map[key].Scalar() : std::string();
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  const auto unit = used ? text.substr(used) : std::string("?");
  int64_t scale = 0;
  if (unit.empty())
    scale = 1;
  else if (unit == "KiB")
    scale = 1ll << 10;
  else if (unit == "MiB")
    scale = 1ll << 20;
  else if (unit == "GiB")
    scale = 1ll << 30;
  if (!scale || value <= 0)
    return refuse(prefix + key,
                  "must be a positive byte count (e.g. 67108864 or 64MiB), "
                  "got '"
                    + text + "'");
  out = value * scale;
  return {};
}

status read_double(const YAML::Node& map, const std::string& prefix,
                   const char* key, double& out) {
  if (!map[key])
    return {};
  const auto text = map[key].IsScalar() ? map[key].Scalar() : std::string();
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (text.empty() || used != text.size() || !(value > 0))
    return refuse(prefix + key,
                  "must be a positive number, got '" + text + "'");
  out = value;
  return {};
}

status read_string(const YAML::Node& map, const std::string& prefix,
                   const char* key, std::string& out) {
  if (!map[key])
    return {};
  if (!map[key].IsScalar() || map[key].Scalar().empty())
    return refuse(prefix + key, "must be a non-empty string");
  out = map[key].Scalar();
  return {};
}

status read_bool(const YAML::Node& map, const std::string& prefix,
                 const char* key, bool& out) {
  if (!map[key])
    return {};
  const auto text = map[key].IsScalar() ? map[key].Scalar() : std::string();
  if (text == "true")
    out = true;
  else if (text == "false")
    out = false;
  else
    return refuse(prefix + key, "must be true or false, got '" + text + "'");
  return {};
}

} // namespace tutti::serve
