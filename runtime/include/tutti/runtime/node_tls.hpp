#pragma once
// Mutual TLS for a daemon, of a job or of a service: its node certificate
// serves the guard in front of its published actors and its outgoing
// connections (security::tls_dialer, installed here). The certificate
// must be valid, from the cluster CA, and name this node.

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>

#include <cstdint>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/config/security_config.hpp"
#include "tutti/runtime/basp_guard.hpp"
#include "tutti/security/tls_dialer.hpp"

namespace tutti {

// `sec` with TLS on (sec.tls_on()): the guard's TLS options for node
// `node_rank`; with security.policy, clients without a certificate may
// show one of its tokens.
expected<basp_guard::tls_options> set_up_node_tls(const security_config& sec,
                                                  int64_t node_rank);

// The actor published at host:port, through a TLS forwarder once TLS is
// installed; the TLS failure, where there was one, is the reason given.
template <class Handle>
expected<Handle> remote_actor(caf::actor_system& sys, const std::string& host,
                              uint16_t port) {
  auto via = security::tls_dialer::route(host, port);
  if (!via)
    return via.error();
  auto handle = sys.middleman().remote_actor<Handle>(via->host, via->port);
  if (handle)
    return *handle;
  if (auto tls = security::tls_dialer::last_failure(host, port); !tls.empty())
    return status::error(tls);
  return status::error(sys.render(handle.error()));
}

} // namespace tutti
