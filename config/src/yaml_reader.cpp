// The reader's plain helpers: key checks, byte sizes, node kinds.

#include "yaml_reader.hpp"

#include <array>
#include <set>
#include <utility>

namespace tutti::config {

status refusal(const std::string& key, const std::string& why) {
  return status::error(key + ": " + why);
}

status check_keys(const YAML::Node& map, const std::string& where,
                  const std::string& prefix,
                  const std::vector<std::string>& known, const char* word) {
  const std::set<std::string> declared(known.begin(), known.end());
  std::set<std::string> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar())
      return refusal(where, "keys must be plain names, not lists or mappings");
    const auto key = kv.first.Scalar();
    if (!seen.insert(key).second)
      return refusal(prefix + key, std::string("duplicate ") + word);
    if (!declared.count(key))
      return refusal(prefix + key, std::string("unknown ") + word);
  }
  return {};
}

namespace {

constexpr std::array<std::pair<const char*, int>, 3> byte_units{
  {{"GiB", 30}, {"MiB", 20}, {"KiB", 10}}};

} // namespace

status parse_byte_size(const std::string& text, int64_t& out) {
  const auto bad = status::error(
    "must be a byte count (e.g. 67108864 or 64MiB), got '" + text + "'");
  const auto digits_end = text.find_first_not_of("0123456789");
  const auto digits = text.substr(0, digits_end);
  const auto unit = digits_end == std::string::npos ? std::string()
                                                    : text.substr(digits_end);
  if (digits.empty() || digits.size() > 18)
    return bad;
  int shift = 0;
  if (!unit.empty()) {
    shift = -1;
    for (const auto& [name, bits] : byte_units)
      if (unit == name)
        shift = bits;
    if (shift < 0)
      return bad;
  }
  const int64_t value = std::stoll(digits);
  if (value > (std::numeric_limits<int64_t>::max() >> shift))
    return bad;
  out = value << shift;
  return {};
}

std::string byte_size_text(int64_t bytes) {
  for (const auto& [name, bits] : byte_units)
    if (bytes > 0 && bytes % (int64_t{1} << bits) == 0)
      return std::to_string(bytes >> bits) + name;
  return std::to_string(bytes);
}

std::string node_kind(const YAML::Node& node) {
  if (node.IsMap())
    return "a mapping";
  if (node.IsSequence())
    return "a list";
  return "'" + (node.IsScalar() ? node.Scalar() : std::string()) + "'";
}

bool written_whole(const std::string& text) {
  return text.find_first_of(".eE") == std::string::npos;
}

} // namespace tutti::config
