#include "tutti/security/peer_registry.hpp"

#include <map>
#include <mutex>

namespace tutti::security::peer_registry {

namespace {

std::mutex mutex;
std::map<uint16_t, peer>& entries() {
  static std::map<uint16_t, peer> map;
  return map;
}

} // namespace

void add(uint16_t loopback_port, const peer& p) {
  std::lock_guard<std::mutex> lock(mutex);
  entries()[loopback_port] = p;
}

void remove(uint16_t loopback_port) {
  std::lock_guard<std::mutex> lock(mutex);
  entries().erase(loopback_port);
}

std::optional<peer> find(uint16_t loopback_port) {
  std::lock_guard<std::mutex> lock(mutex);
  auto i = entries().find(loopback_port);
  if (i == entries().end())
    return std::nullopt;
  return i->second;
}

} // namespace tutti::security::peer_registry
