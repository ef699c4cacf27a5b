#include "tutti/security/tls.hpp"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/stat.h>

#include <cstdlib>

#include "openssl_util.hpp"

namespace tutti::security {

using namespace detail;

namespace {

std::string files_stamp(const tls_files& files) {
  std::string out;
  for (const auto* path : {&files.ca, &files.cert, &files.key, &files.crl}) {
    struct stat st {};
    if (::stat(path->c_str(), &st) == 0)
      out += std::to_string(st.st_size) + ":"
             + std::to_string(st.st_mtim.tv_sec) + "."
             + std::to_string(st.st_mtim.tv_nsec) + ";";
    else
      out += "-;";
  }
  return out;
}

using crl_list = std::vector<std::shared_ptr<X509_CRL>>;

// Every CRL in a PEM file.
expected<crl_list> read_crls(const std::string& path) {
  bio_ptr in(BIO_new_file(path.c_str(), "r"));
  if (!in)
    return status::error("cannot read the revocation list " + path + ": "
                         + openssl_error());
  crl_list out;
  while (
    X509_CRL* crl = PEM_read_bio_X509_CRL(in.get(), nullptr, nullptr, nullptr))
    out.emplace_back(crl, X509_CRL_free);
  ERR_clear_error(); // the end of the file reads as an error
  if (out.empty())
    return status::error("no revocation list in " + path);
  return out;
}

// Checks certificates against `crls` too (every CA in the bundle then
// needs its list in the file).
status add_crls(X509_STORE* store, const crl_list& crls) {
  for (const auto& crl : crls)
    if (X509_STORE_add_crl(store, crl.get()) != 1)
      return status::error("cannot use a revocation list: " + openssl_error());
  if (!crls.empty() && X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK) != 1)
    return status::error("cannot turn on revocation checks: "
                         + openssl_error());
  return {};
}

// The certificate chains to the CA bundle, is valid now and not revoked.
status check_chain(X509* cert, const std::string& ca_path,
                   const crl_list& crls) {
  std::unique_ptr<X509_STORE, deleter<X509_STORE_free>> store(X509_STORE_new());
  if (!store || X509_STORE_load_file(store.get(), ca_path.c_str()) != 1)
    return status::error("cannot load the CA " + ca_path + ": "
                         + openssl_error());
  TUTTI_RETURN_IF_ERROR(add_crls(store.get(), crls));
  std::unique_ptr<X509_STORE_CTX, deleter<X509_STORE_CTX_free>> ctx(
    X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1)
    return status::error("cannot check the certificate: " + openssl_error());
  if (X509_verify_cert(ctx.get()) != 1)
    return status::error(
      X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
  return {};
}

} // namespace

tls_files for_node(tls_files files, int64_t node_rank) {
  for (auto* path : {&files.ca, &files.cert, &files.key,
                     &files.key_passphrase_file, &files.crl})
    for (auto at = path->find("{node}"); at != std::string::npos;
         at = path->find("{node}"))
      path->replace(at, 6, std::to_string(node_rank));
  return files;
}

tls_files client_tls_files_from_environment() {
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  return {get("TUTTI_TLS_CA"), get("TUTTI_TLS_CERT"), get("TUTTI_TLS_KEY"), "",
          get("TUTTI_TLS_CRL")};
}

expected<std::shared_ptr<tls_endpoint>> client_tls_from_environment() {
  const tls_files files = client_tls_files_from_environment();
  if (files.empty())
    return std::shared_ptr<tls_endpoint>();
  if (files.cert.empty() && files.key.empty()) {
    auto token = client_token_from_environment();
    if (!token)
      return token.error();
    if (token->empty())
      return status::error("TUTTI_TLS_CA is set without TUTTI_TLS_CERT and "
                           "TUTTI_TLS_KEY, and no token (TUTTI_TOKEN_FILE or "
                           "TUTTI_TOKEN)");
  }
  auto loaded = tls_endpoint::load(files, tls_role::client);
  if (!loaded)
    return loaded.error().with_context(
      "TUTTI_TLS_CA/TUTTI_TLS_CERT/TUTTI_TLS_KEY: ");
  return *loaded;
}

expected<secret> client_token_from_environment() {
  if (const char* file = std::getenv("TUTTI_TOKEN_FILE"); file && *file) {
    auto read = secret_from_file(file);
    if (!read)
      return read.error().with_context("TUTTI_TOKEN_FILE: ");
    return *read;
  }
  if (auto env = secret_from_env("TUTTI_TOKEN"))
    return *env;
  return secret();
}

bool set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

tls_endpoint::tls_endpoint(tls_files files, tls_role role)
  : files_(std::move(files)), role_(role) {}

tls_endpoint::~tls_endpoint() = default;

expected<std::shared_ptr<tls_endpoint>> tls_endpoint::load(
  const tls_files& files, tls_role role) {
  const bool ca_only = role == tls_role::client && files.cert.empty()
                       && files.key.empty() && !files.ca.empty();
  if (!ca_only && (files.ca.empty() || files.cert.empty() || files.key.empty()))
    return status::error("TLS needs ca, cert and key");
  std::shared_ptr<tls_endpoint> out(new tls_endpoint(files, role));
  TUTTI_RETURN_IF_ERROR(out->reload());
  return out;
}

status tls_endpoint::reload() {
  const auto stamp = files_stamp(files_);
  if (files_.cert.empty()) {
    // A token client: it checks the daemons against the CA, and has no
    // certificate of its own.
    ssl_ctx_ptr ctx(SSL_CTX_new(TLS_client_method()));
    if (!ctx || SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1
        || SSL_CTX_load_verify_locations(ctx.get(), files_.ca.c_str(), nullptr)
             != 1)
      return status::error("cannot set up TLS with the CA " + files_.ca + ": "
                           + openssl_error());
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET);
    std::lock_guard<std::mutex> lock(mutex_);
    ctx_ = std::shared_ptr<SSL_CTX>(ctx.release(), SSL_CTX_free);
    self_ = identity{};
    stamp_ = stamp;
    return {};
  }
  auto cert = read_certificate(files_.cert);
  if (!cert)
    return cert.error();
  secret passphrase;
  if (!files_.key_passphrase_file.empty()) {
    auto read = secret_from_file(files_.key_passphrase_file);
    if (!read)
      return read.error();
    passphrase = *read;
  } else if (auto env = secret_from_env("TUTTI_TLS_KEY_PASSPHRASE")) {
    passphrase = *env;
  }
  auto key = read_private_key(files_.key, &passphrase);
  if (!key)
    return key.error();
  struct stat st {};
  if (::stat(files_.key.c_str(), &st) == 0
      && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return status::error("key " + files_.key
                         + " is readable by others (chmod 600 it)");
  if (X509_check_private_key(cert->get(), key->get()) != 1)
    return status::error("key " + files_.key + " does not belong to "
                         + files_.cert);
  crl_list crls;
  if (!files_.crl.empty()) {
    auto read = read_crls(files_.crl);
    if (!read)
      return read.error();
    crls = std::move(*read);
  }
  if (auto chained = check_chain(cert->get(), files_.ca, crls); !chained.ok())
    return status::error("certificate " + files_.cert + ": " + chained.message()
                         + " (CA " + files_.ca + ")");
  auto who = identity_of(cert->get());
  if (!who)
    return status::error("certificate " + files_.cert + ": " + who.message());

  ssl_ctx_ptr ctx(SSL_CTX_new(role_ == tls_role::server ? TLS_server_method()
                                                        : TLS_client_method()));
  if (!ctx)
    return status::error("cannot make a TLS context: " + openssl_error());
  SSL_CTX* c = ctx.get();
  if (SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) != 1
      || SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION) != 1
      || SSL_CTX_use_certificate(c, cert->get()) != 1
      || SSL_CTX_use_PrivateKey(c, key->get()) != 1
      || SSL_CTX_load_verify_locations(c, files_.ca.c_str(), nullptr) != 1)
    return status::error("cannot set up TLS with " + files_.cert + ": "
                         + openssl_error());
  TUTTI_RETURN_IF_ERROR(add_crls(SSL_CTX_get_cert_store(c), crls));
  // A client without a certificate is refused after the handshake unless
  // the caller takes tokens (tls_stream::handshake).
  SSL_CTX_set_verify(c,
                     role_ == tls_role::server
                       ? SSL_VERIFY_PEER
                       : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  SSL_CTX_set_verify_depth(c, 2);
  // No session tickets or resumption: every connection shows its
  // certificate, so a revoked or rotated one is noticed at once.
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  if (role_ == tls_role::server) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files_.ca.c_str());
    if (!names)
      return status::error("cannot read CA names from " + files_.ca + ": "
                           + openssl_error());
    SSL_CTX_set_client_CA_list(c, names);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ctx_ = std::shared_ptr<SSL_CTX>(ctx.release(), SSL_CTX_free);
  self_ = *who;
  crls_ = std::move(crls);
  stamp_ = stamp;
  last_reload_error_.clear();
  return {};
}

std::shared_ptr<SSL_CTX> tls_endpoint::context() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (files_stamp(files_) == stamp_)
      return ctx_;
  }
  if (auto s = reload(); !s.ok()) {
    // Files mid-rotation (or a bad rotation): keep serving with the old
    // ones; the operator sees why in `tutti certs show`.
    std::lock_guard<std::mutex> lock(mutex_);
    last_reload_error_ = s.message();
    return ctx_;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return ctx_;
}

std::string tls_endpoint::revoked(X509* cert) {
  (void)context(); // re-reads changed files
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& crl : crls_) {
    X509_REVOKED* entry = nullptr;
    if (X509_CRL_get0_by_cert(crl.get(), &entry, cert) == 1)
      return "its certificate was revoked (" + files_.crl + ")";
  }
  return "";
}

std::string tls_stream::recheck(tls_endpoint& endpoint) const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  return cert ? endpoint.revoked(cert) : "";
}

identity tls_endpoint::self() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return self_;
}

tls_stream::tls_stream(std::shared_ptr<SSL_CTX> ctx, SSL* ssl, int fd)
  : ctx_(std::move(ctx)), ssl_(ssl), fd_(fd) {}

tls_stream::~tls_stream() {
  SSL_shutdown(ssl_); // best effort: a close_notify, never waited for
  SSL_free(ssl_);
}

expected<std::unique_ptr<tls_stream>> tls_stream::open(
  std::shared_ptr<SSL_CTX> ctx, int fd, tls_role role,
  std::chrono::milliseconds limit) {
  if (!ctx)
    return status::error("no TLS context");
  if (!set_nonblocking(fd))
    return status::error("cannot make the socket non-blocking");
  SSL* ssl = SSL_new(ctx.get());
  if (!ssl)
    return status::error("cannot make a TLS connection: " + openssl_error());
  std::unique_ptr<tls_stream> out(new tls_stream(ctx, ssl, fd));
  if (SSL_set_fd(ssl, fd) != 1)
    return status::error("cannot attach TLS: " + openssl_error());
  if (role == tls_role::server)
    SSL_set_accept_state(ssl);
  else
    SSL_set_connect_state(ssl);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ERR_clear_error();
  for (;;) {
    const int rc = SSL_do_handshake(ssl);
    if (rc == 1)
      break;
    const int err = SSL_get_error(ssl, rc);
    short events = 0;
    if (err == SSL_ERROR_WANT_READ)
      events = POLLIN;
    else if (err == SSL_ERROR_WANT_WRITE)
      events = POLLOUT;
    else {
      std::string why = openssl_error("connection closed during handshake");
      const long verify = SSL_get_verify_result(ssl);
      if (verify != X509_V_OK)
        why += " (" + std::string(X509_verify_cert_error_string(verify)) + ")";
      return status::error("TLS handshake failed: " + why);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return status::error("TLS handshake not finished within "
                           + std::to_string(limit.count()) + " ms");
    pollfd p{fd, events, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0)
      return status::error("poll failed during the TLS handshake");
  }
  if (SSL_get_verify_result(ssl) != X509_V_OK)
    return status::error("peer certificate not verified");
  return out;
}

expected<std::unique_ptr<tls_stream>> tls_stream::accept_web_client(
  std::shared_ptr<SSL_CTX> ctx, int fd, std::chrono::milliseconds limit) {
  return open(std::move(ctx), fd, tls_role::server, limit);
}

expected<std::unique_ptr<tls_stream>> tls_stream::handshake(
  std::shared_ptr<SSL_CTX> ctx, int fd, tls_role role,
  std::chrono::milliseconds limit, bool allow_no_certificate) {
  auto opened = open(std::move(ctx), fd, role, limit);
  if (!opened)
    return opened.error();
  auto out = std::move(*opened);
  SSL* ssl = out->ssl_;
  x509_ptr peer(SSL_get1_peer_certificate(ssl));
  if (!peer && role == tls_role::server && allow_no_certificate)
    return out; // it must show a token next
  if (!peer)
    return status::error("peer presented no certificate");
  out->has_certificate_ = true;
  auto who = identity_of(peer.get());
  if (!who)
    return status::error("peer certificate: " + who.message());
  out->peer_ = *who;
  return out;
}

bool tls_stream::pending() const { return SSL_pending(ssl_) > 0; }

long tls_stream::read(char* buf, size_t n) {
  const int rc = SSL_read(ssl_, buf, static_cast<int>(n));
  if (rc > 0)
    return rc;
  const int err = SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
    return 0;
  ERR_clear_error();
  return -1;
}

bool tls_stream::write_all(const char* buf, size_t n,
                           std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (n > 0) {
    const int rc = SSL_write(ssl_, buf, static_cast<int>(n));
    if (rc > 0) {
      buf += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    const int err = SSL_get_error(ssl_, rc);
    short events = 0;
    if (err == SSL_ERROR_WANT_WRITE)
      events = POLLOUT;
    else if (err == SSL_ERROR_WANT_READ)
      events = POLLIN;
    else {
      ERR_clear_error();
      return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, events, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
  }
  return true;
}

} // namespace tutti::security
