#pragma once
// Who is behind each TLS connection that a daemon's guard passed on to
// CAF's middleman, keyed by the loopback port the guard connected from. The
// middleman reports that port as a node's remote address, so an actor
// (the coordinator) can ask who sent a message: the certificate, not what
// the message claims.

#include <cstdint>
#include <optional>
#include <string>

#include "tutti/security/identity.hpp"

namespace tutti::security::peer_registry {

struct peer {
  identity who;
  std::string address; // the peer's own address, as the guard saw it
};

void add(uint16_t loopback_port, const peer& p);
void remove(uint16_t loopback_port);
std::optional<peer> find(uint16_t loopback_port);

} // namespace tutti::security::peer_registry
