#pragma once
// Mutual TLS 1.3 for the control plane. A tls_endpoint holds this
// process's certificate, key and the cluster CA; each connection takes the
// newest loaded context, and the files are read again when they change on
// disk (rotation: new connections use new certificates, open ones go on).
// Both sides present a certificate from the CA; anything else fails the
// handshake.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/security/identity.hpp"
#include "tutti/security/secret.hpp"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;
typedef struct X509_crl_st X509_CRL;

namespace tutti::security {

struct tls_files {
  std::string ca, cert, key;
  // The key's passphrase, if it is encrypted: read from this file (mode
  // 0600), or from TUTTI_TLS_KEY_PASSPHRASE when empty.
  std::string key_passphrase_file;
  // The CA's revocation list (PEM; may hold one per CA), optional: a
  // certificate it lists is refused, and open connections holding one
  // are closed.
  std::string crl;
  bool empty() const { return ca.empty() && cert.empty() && key.empty(); }
};

enum class tls_role { server, client };

class tls_endpoint {
public:
  // Loads and checks the files: each readable, the key matching the
  // certificate, the certificate issued by the CA and valid now, and naming
  // an identity. Fails naming the file and why. A client may have only the
  // CA (no cert, no key): it then authenticates with a token.
  static expected<std::shared_ptr<tls_endpoint>> load(const tls_files& files,
                                                      tls_role role);
  ~tls_endpoint();

  // The context for a new connection: re-reads the files when one changed
  // (a rotation that does not load keeps the old context, logged once).
  std::shared_ptr<SSL_CTX> context();
  // Who this endpoint's certificate names.
  identity self() const;
  const tls_files& files() const { return files_; }
  // Why `cert` is no longer trusted ("" while it is): listed in the
  // revocation list as it is now on disk (re-read when it changed).
  std::string revoked(X509* cert);

private:
  tls_endpoint(tls_files files, tls_role role);
  status reload();

  tls_files files_;
  tls_role role_;
  mutable std::mutex mutex_;
  std::shared_ptr<SSL_CTX> ctx_;
  identity self_;
  std::vector<std::shared_ptr<X509_CRL>> crls_;
  std::string stamp_; // the files' sizes and modification times
  std::string last_reload_error_;
};

// One TLS connection over a connected, non-blocking socket (not owned).
class tls_stream {
public:
  // Runs the handshake within `limit` (poll, no spinning). Fails with why:
  // a plaintext peer, another CA, an expired certificate, no certificate,
  // or the time limit.
  // `allow_no_certificate`: a server lets a client without a certificate
  // through (it must then present a token; peer() is empty).
  static expected<std::unique_ptr<tls_stream>> handshake(
    std::shared_ptr<SSL_CTX> ctx, int fd, tls_role role,
    std::chrono::milliseconds limit, bool allow_no_certificate = false);
  // The server side of an HTTPS endpoint's connection (a context from
  // server_tls_context(), web_config.hpp): the context decides whether a
  // client certificate is required, and one that verifies needs no
  // identity (a scraper's certificate names no tutti role).
  static expected<std::unique_ptr<tls_stream>> accept_web_client(
    std::shared_ptr<SSL_CTX> ctx, int fd, std::chrono::milliseconds limit);
  ~tls_stream();

  const identity& peer() const { return peer_; }
  bool peer_has_certificate() const { return has_certificate_; }
  // Why the peer's certificate is no longer trusted by `endpoint` ("" if
  // it is): checked again on open connections (revocation).
  std::string recheck(tls_endpoint& endpoint) const;
  int fd() const { return fd_; }
  // Decrypted bytes buffered inside TLS (poll on fd() does not see them).
  bool pending() const;
  // > 0 bytes read; 0 nothing now; -1 closed or failed.
  long read(char* buf, size_t n);
  // All of it within `limit`; false when the peer is gone or too slow.
  bool write_all(const char* buf, size_t n, std::chrono::milliseconds limit);

private:
  tls_stream(std::shared_ptr<SSL_CTX> ctx, SSL* ssl, int fd);
  // The handshake alone, the peer's certificate (if any) verified.
  static expected<std::unique_ptr<tls_stream>> open(
    std::shared_ptr<SSL_CTX> ctx, int fd, tls_role role,
    std::chrono::milliseconds limit);
  std::shared_ptr<SSL_CTX> ctx_;
  SSL* ssl_;
  int fd_;
  identity peer_;
  bool has_certificate_ = false;
};

// The files with "{node}" replaced by `node_rank` (one config for every
// daemon, each with its own certificate).
tls_files for_node(tls_files files, int64_t node_rank);

// A client's TLS identity from TUTTI_TLS_CA, TUTTI_TLS_CERT and
// TUTTI_TLS_KEY (a user certificate for the CLI); nullptr when none is set.
// With a token instead of a certificate (client_token_from_environment),
// TUTTI_TLS_CA alone: the client checks the daemons, and shows no
// certificate itself.
expected<std::shared_ptr<tls_endpoint>> client_tls_from_environment();
// Those variables (and TUTTI_TLS_CRL) as they are, unchecked: for a client
// whose TLS is not the control plane's (an HTTPS front's CA alone).
tls_files client_tls_files_from_environment();
// An admin-issued token from the file TUTTI_TOKEN_FILE (mode 0600) or the
// variable TUTTI_TOKEN; empty when neither is set.
expected<secret> client_token_from_environment();

// Makes a socket non-blocking; false on failure.
bool set_nonblocking(int fd);

} // namespace tutti::security
