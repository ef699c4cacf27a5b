#pragma once
// The cluster's certificate authority and the certificates it issues
// (EC P-256 keys, SHA-256 signatures). A CA directory holds ca.crt and
// ca.key; issued files go next to them as node-N.{crt,key} or
// user-NAME.{crt,key}. Key files are written with mode 0600.

#include <cstdint>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/security/identity.hpp"
#include "tutti/security/secret.hpp"

namespace tutti::security {

struct issued_files {
  std::string cert, key;
};

// Makes DIR/ca.crt and DIR/ca.key (valid `days`). Refuses to overwrite an
// existing CA. Also writes an empty revocation list (ca.crl).
status init_ca(const std::string& dir, int64_t days);

// Issues a certificate for `who`, signed by the CA in `ca_dir`, valid from
// `start_offset_s` (relative to now) for `lifetime_s`. Node certificates
// serve and connect (server and client auth); user certificates connect.
// Written into `out_dir` (empty: `ca_dir`); the key encrypted (AES-256)
// with `passphrase` when one is given.
expected<issued_files> issue_certificate(const std::string& ca_dir,
                                         const identity& who,
                                         int64_t lifetime_s,
                                         const std::string& out_dir = "",
                                         int64_t start_offset_s = -60,
                                         const secret& passphrase = {});

// The CA's revocation list, DIR/ca.crl (PEM, signed by the CA, valid as
// long as the CA). `security.tls.crl` points daemons at it: a listed
// certificate fails every handshake, and open connections holding one are
// closed once the daemon sees the new list (it is re-read when it changes).
std::string crl_path(const std::string& ca_dir);
// An empty list (init_ca writes one).
status write_empty_crl(const std::string& ca_dir);
// Adds the certificate in `cert_path` (issued by the CA in `ca_dir`) to
// the list; returns the list's path.
expected<std::string> revoke_certificate(const std::string& ca_dir,
                                         const std::string& cert_path);

// What a PEM certificate holds, in lines: subject, who it names, issuer,
// validity (and whether it is expired), serial, usages.
expected<std::string> describe_certificate(const std::string& path);

// The name a client checks a server's certificate against: its first DNS
// subject alternative name, else its CN. Fails naming the file.
expected<std::string> certificate_host_name(const std::string& path);

} // namespace tutti::security
