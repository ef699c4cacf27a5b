#include "tutti/runtime/node_tls.hpp"

#include "tutti/runtime/log.hpp"
#include "tutti/security/access_policy.hpp"
#include "tutti/security/tls_dialer.hpp"

namespace tutti {

expected<basp_guard::tls_options> set_up_node_tls(const security_config& sec,
                                                  int64_t node_rank) {
  const auto files = security::for_node({sec.tls.ca, sec.tls.cert, sec.tls.key,
                                         sec.tls.key_passphrase_file,
                                         sec.tls.crl},
                                        node_rank);
  auto server = security::tls_endpoint::load(files, security::tls_role::server);
  if (!server)
    return server.error();
  const auto self = (*server)->self();
  if (self.kind != security::identity_kind::node || self.node_rank != node_rank)
    return status::error("certificate " + files.cert + " names " + self.text()
                         + ", but this daemon is node "
                         + std::to_string(node_rank));
  auto client = security::tls_endpoint::load(files, security::tls_role::client);
  if (!client)
    return client.error();
  basp_guard::tls_options out;
  out.endpoint = *server;
  out.handshake_limit = std::chrono::milliseconds(
    static_cast<int64_t>(sec.handshake_timeout_s * 1000));
  if (!sec.policy.empty()) {
    auto policy = security::access_policy::open(sec.policy);
    if (!policy)
      return status::error("security.policy: " + policy.message());
    // Clients without a certificate may show a token the policy holds.
    out.token_identity = [policy = *policy](const security::secret& token) {
      return policy->token_identity(token);
    };
  }
  security::tls_dialer::install(*client, out.handshake_limit);
  log_info("tls", "mutual TLS 1.3 on as " + self.text() + " (CA " + files.ca
                    + ")");
  return out;
}

} // namespace tutti
