#pragma once
// The security section, the same in a job's config and in a service's:
// mutual TLS between the daemons, operators' roles and tokens.

#include <string>

#include "tutti/config/field.hpp"

namespace tutti {

// Mutual TLS on every daemon port and outgoing connection, operators'
// roles, the audit log. Paths may hold {node}, replaced by the daemon's node
// rank: one config for every daemon, each with its own certificate.
struct tls_config {
  std::string ca;
  std::string cert;
  std::string key;
  std::string key_passphrase_file;
  std::string crl;
};

template <class Visitor>
void visit_fields(Visitor& v, tls_config& c) {
  using namespace config;
  v.field("ca", c.ca, "the cluster CA's certificate (PEM; may hold two "
                      "during a CA changeover)",
          not_fingerprinted);
  v.field("cert", c.cert, "this daemon's node certificate ({node}: its rank)",
          not_fingerprinted);
  v.field("key", c.key, "its private key (mode 0600)", not_fingerprinted);
  v.field("key_passphrase_file", c.key_passphrase_file,
          "the key's passphrase, if encrypted (a 0600 file; else "
          "TUTTI_TLS_KEY_PASSPHRASE)",
          not_fingerprinted);
  v.field("crl", c.crl,
          "the CA's revocation list (`tutti certs revoke`; re-read when it "
          "changes: listed certificates are refused and cut off)",
          not_fingerprinted);
}

struct security_config {
  bool required = false;
  tls_config tls;
  double handshake_timeout_s = 5;
  std::string policy;

  bool tls_on() const { return !tls.ca.empty(); }
};

template <class Visitor>
void visit_fields(Visitor& v, security_config& c) {
  using namespace config;
  v.field("required", c.required,
          "refuse to start without security.tls (no plaintext fallback)",
          not_fingerprinted);
  v.field("tls", c.tls, "mutual TLS 1.3 on the control plane");
  v.field("handshake_timeout_s", c.handshake_timeout_s,
          "a TLS handshake not done in this time is dropped", above(0),
          at_most(60), not_fingerprinted);
  v.field("policy", c.policy,
          "operators' roles and token hashes (YAML; re-read when it changes)",
          not_fingerprinted);
}

} // namespace tutti
