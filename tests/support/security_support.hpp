#pragma once
// Helpers for the security tests: a PKI in a scratch directory, a daemon
// config with security.tls, a raw OpenSSL client that presents any
// certificate (expired ones too), and a process's CPU time.

#include <openssl/err.h>
#include <openssl/bn.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <crypt.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "daemon_support.hpp"
#include "tutti/security/certs.hpp"

namespace tutti::testing {

struct test_pki {
  std::filesystem::path dir;     // CA, node-0, node-1, users
  std::filesystem::path other;   // another CA and its node-1
  std::filesystem::path expired; // node-1, expired an hour ago
};

inline test_pki make_pki(const std::filesystem::path& root) {
  using namespace tutti::security;
  test_pki p{root / "pki", root / "other-pki", root / "expired"};
  REQUIRE(init_ca(p.dir.string(), 30).ok());
  REQUIRE(init_ca(p.other.string(), 30).ok());
  identity node;
  node.kind = identity_kind::node;
  for (int64_t n : {0, 1}) {
    node.node_rank = n;
    REQUIRE(issue_certificate(p.dir.string(), node, 86400).ok());
  }
  node.node_rank = 1;
  REQUIRE(issue_certificate(p.other.string(), node, 86400).ok());
  REQUIRE(issue_certificate(p.dir.string(), node, 60, p.expired.string(), -7200)
            .ok());
  for (auto [name, role] :
       {std::pair{"vera", "viewer"}, std::pair{"otto", "operator"},
        std::pair{"ada", "admin"}}) {
    identity user;
    user.user = name;
    user.role = role;
    REQUIRE(issue_certificate(p.dir.string(), user, 86400).ok());
  }
  return p;
}

// daemon_config's job with mutual TLS from `pki` (node-{node} files).
inline std::string tls_daemon_config(const test_pki& pki,
                                     const std::string& data_dir,
                                     const std::string& run_dir, int port,
                                     int steps, int join_timeout_s = 20) {
  const auto d = pki.dir.string();
  auto base = daemon_config(data_dir, run_dir, port, steps,
                            {"127.0.0.1", "127.0.0.1"}, join_timeout_s);
  if (const auto& mode = tls_mode_section(); !mode.empty())
    base.erase(base.rfind(mode)); // this test brings its own PKI
  return base
         + "security:\n  required: true\n  handshake_timeout_s: 2\n"
           "  tls:\n    ca: "
         + d + "/ca.crt\n    cert: " + d + "/node-{node}.crt\n    key: " + d
         + "/node-{node}.key\n";
}

// A live 2-daemon job under mutual TLS (tls_daemon_config's), training.
struct tls_job {
  std::filesystem::path config, run_dir, metrics;
  std::unique_ptr<child_process> node0, node1;
};

// Writes DIR/job.yaml (tls_daemon_config plus `extra` lines appended to
// its security section), starts both daemons (logs DIR/node{0,1}.log) and
// waits until 3 steps are done.
inline tls_job start_tls_job(const test_pki& pki,
                             const std::filesystem::path& dir,
                             const std::filesystem::path& data, int port,
                             const std::string& extra = "") {
  tls_job job{dir / "job.yaml", dir / "run", dir / "run" / "metrics.jsonl",
              nullptr, nullptr};
  write_text(job.config, tls_daemon_config(pki, data.string(),
                                           job.run_dir.string(), port, 100000)
                           + extra);
  job.node0 = start_daemon(job.config, 0, dir / "node0.log");
  job.node1 = start_daemon(job.config, 1, dir / "node1.log");
  REQUIRE(wait_until(
    [&] {
      return count_lines(job.metrics) >= 3 || !job.node0->running()
             || !job.node1->running();
    },
    120));
  INFO(tail(read_text(job.run_dir / "tuttid-0.log.jsonl")));
  REQUIRE(job.node0->running());
  return job;
}

// Opens a TLS connection to 127.0.0.1:port presenting `cert`/`key` (none
// when empty), trusting `ca`, and reports whether the peer let it through:
// a daemon's guard passes an accepted peer to CAF, whose BASP handshake
// then arrives; a refused one gets an alert or a closed connection.
inline bool tls_peer_accepted(int port, const std::string& ca,
                              const std::string& cert, const std::string& key) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  REQUIRE(ctx);
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr);
  if (!cert.empty()) {
    REQUIRE(SSL_CTX_use_certificate_file(ctx, cert.c_str(), SSL_FILETYPE_PEM)
            == 1);
    REQUIRE(SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM)
            == 1);
  }
  int fd = tcp_connect("127.0.0.1", port);
  REQUIRE(fd >= 0);
  // Blocking with a receive timeout: a refusal must come within it.
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  bool accepted = false;
  if (SSL_connect(ssl) == 1) {
    char buf[64];
    accepted = SSL_read(ssl, buf, sizeof(buf)) > 0;
  }
  ERR_clear_error();
  SSL_free(ssl);
  close(fd);
  SSL_CTX_free(ctx);
  return accepted;
}

// The serial number (hex) of the certificate the daemon at port presents
// to a client holding `cert`/`key`; "" when the handshake fails.
inline std::string presented_serial(int port, const std::string& ca,
                                    const std::string& cert,
                                    const std::string& key) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  REQUIRE(ctx);
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  REQUIRE(SSL_CTX_use_certificate_file(ctx, cert.c_str(), SSL_FILETYPE_PEM)
          == 1);
  REQUIRE(SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) == 1);
  int fd = tcp_connect("127.0.0.1", port);
  REQUIRE(fd >= 0);
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  std::string serial;
  if (SSL_connect(ssl) == 1) {
    X509* peer = SSL_get1_peer_certificate(ssl);
    if (peer) {
      BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(peer), nullptr);
      char* hex = BN_bn2hex(bn);
      serial = hex;
      OPENSSL_free(hex);
      BN_free(bn);
      X509_free(peer);
    }
  }
  ERR_clear_error();
  SSL_free(ssl);
  close(fd);
  SSL_CTX_free(ctx);
  return serial;
}

// User + system CPU seconds of process `pid` so far.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  auto close_paren = text.rfind(')');
  std::istringstream fields(text.substr(close_paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; fields >> field; ++i)
    if (i == 14 || i == 15)
      ticks += std::stod(field);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A bcrypt hash of `password` (libcrypt; the lowest cost: a test).
inline std::string bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  REQUIRE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)));
  crypt_data data{};
  const char* hash = crypt_rn(password.c_str(), salt, &data, sizeof(data));
  REQUIRE(hash);
  REQUIRE(std::string(hash).rfind("$2b$04$", 0) == 0);
  return hash;
}

// `tutti token issue` into a 0600 file next to `policy` (created when
// missing); the file's path.
inline std::filesystem::path issue_token(const std::filesystem::path& policy,
                                         const std::string& user,
                                         const std::string& role) {
  const auto file = policy.parent_path() / (user + ".token");
  // Only stdout (the token) into the file; run() adds 2>&1 at the end.
  auto r = run("sh -c '" + tutti_bin() + " token issue --policy "
                 + policy.string() + " --user " + user + " --role " + role
                 + " > " + file.string() + "'",
               30);
  INFO(r.output);
  REQUIRE(r.status == 0);
  ::chmod(file.c_str(), 0600);
  return file;
}

// A web config's tls_server_config with node 0's certificate and key from
// `pki_dir`; `keys` adds lines to it.
inline std::string node0_tls_server_config(const std::string& pki_dir,
                                           const std::string& keys = "") {
  return "tls_server_config:\n  cert_file: " + pki_dir
         + "/node-0.crt\n  key_file: " + pki_dir + "/node-0.key\n" + keys;
}

} // namespace tutti::testing
