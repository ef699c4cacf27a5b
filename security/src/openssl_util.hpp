#pragma once
// Owning pointers for OpenSSL objects and the error queue as text: every
// OpenSSL call in this part is checked and its failure said in one line.

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/security/identity.hpp"
#include "tutti/security/secret.hpp"

namespace tutti::security::detail {

template <auto Free>
struct deleter {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};
using x509_ptr = std::unique_ptr<X509, deleter<X509_free>>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, deleter<EVP_PKEY_free>>;
using bio_ptr = std::unique_ptr<BIO, deleter<BIO_free_all>>;
using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, deleter<SSL_CTX_free>>;
using ssl_ptr = std::unique_ptr<SSL, deleter<SSL_free>>;

// The oldest error on this thread's OpenSSL queue (the queue is cleared),
// or `fallback` when there is none.
std::string openssl_error(const std::string& fallback = "unknown error");

expected<x509_ptr> read_certificate(const std::string& path);
// `passphrase`: for an encrypted key (nullptr or empty: none).
expected<pkey_ptr> read_private_key(const std::string& path,
                                    const secret* passphrase = nullptr);
// Writes `pem` to `path` with mode `mode`, through a temporary file and a
// rename so that nothing is half-written.
status write_file(const std::string& path, const std::string& pem,
                  unsigned mode);

// Who a certificate names (its subject's OU and CN).
expected<identity> identity_of(X509* cert);

} // namespace tutti::security::detail
