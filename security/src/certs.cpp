#include "tutti/security/certs.hpp"

#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <sstream>

#include "openssl_util.hpp"

namespace tutti::security {

namespace {

using namespace detail;
namespace fs = std::filesystem;

expected<pkey_ptr> new_ec_key() {
  pkey_ptr key(EVP_EC_gen("P-256"));
  if (!key)
    return status::error("cannot make an EC key: " + openssl_error());
  return key;
}

status add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext)
    return status::error(std::string("cannot make extension ") + value + ": "
                         + openssl_error());
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (!ok)
    return status::error("cannot add extension: " + openssl_error());
  return {};
}

status set_subject(X509* cert, const std::string& unit,
                   const std::string& common) {
  X509_NAME* name = X509_get_subject_name(cert);
  auto add = [&](const char* field, const std::string& value) {
    return X509_NAME_add_entry_by_txt(
      name, field, MBSTRING_UTF8,
      reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1, 0);
  };
  if (!add("O", "tutti") || !add("OU", unit) || !add("CN", common))
    return status::error("cannot set the subject: " + openssl_error());
  return {};
}

// A new certificate for `key`: random 128-bit serial, validity, subject.
expected<x509_ptr> new_certificate(EVP_PKEY* key, const std::string& unit,
                                   const std::string& common,
                                   int64_t start_offset_s, int64_t lifetime_s) {
  x509_ptr cert(X509_new());
  if (!cert)
    return status::error("cannot make a certificate: " + openssl_error());
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1)
    return status::error("no random serial: " + openssl_error());
  serial[0] &= 0x7f; // positive
  BIGNUM* number = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool serial_ok = number
                         && BN_to_ASN1_INTEGER(
                           number, X509_get_serialNumber(cert.get()));
  BN_free(number);
  if (!serial_ok || !X509_set_version(cert.get(), 2)
      || !X509_gmtime_adj(X509_getm_notBefore(cert.get()), start_offset_s)
      || !X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                          start_offset_s + lifetime_s)
      || !X509_set_pubkey(cert.get(), key))
    return status::error("cannot fill the certificate: " + openssl_error());
  TUTTI_RETURN_IF_ERROR(set_subject(cert.get(), unit, common));
  return cert;
}

expected<std::string> pem_of(X509* cert) {
  bio_ptr out(BIO_new(BIO_s_mem()));
  if (!out || !PEM_write_bio_X509(out.get(), cert))
    return status::error("cannot write PEM: " + openssl_error());
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

expected<std::string> pem_of(EVP_PKEY* key, const secret& passphrase) {
  bio_ptr out(BIO_new(BIO_s_mem()));
  const auto& pass = passphrase.reveal();
  if (!out
      || !PEM_write_bio_PrivateKey(
        out.get(), key, pass.empty() ? nullptr : EVP_aes_256_cbc(),
        pass.empty() ? nullptr
                     : reinterpret_cast<const unsigned char*>(pass.data()),
        static_cast<int>(pass.size()), nullptr, nullptr))
    return status::error("cannot write PEM: " + openssl_error());
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

status write_pair(X509* cert, EVP_PKEY* key, const issued_files& to,
                  const secret& passphrase = {}) {
  auto cert_pem = pem_of(cert);
  if (!cert_pem)
    return cert_pem.error();
  auto key_pem = pem_of(key, passphrase);
  if (!key_pem)
    return key_pem.error();
  // The key first: a certificate without its key is useless, not harmful.
  TUTTI_RETURN_IF_ERROR(write_file(to.key, *key_pem, 0600));
  return write_file(to.cert, *cert_pem, 0644);
}

std::string time_text(const ASN1_TIME* t) {
  bio_ptr out(BIO_new(BIO_s_mem()));
  if (!out || !ASN1_TIME_print(out.get(), t))
    return "?";
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string name_text(X509_NAME* name) {
  bio_ptr out(BIO_new(BIO_s_mem()));
  if (!out || X509_NAME_print_ex(out.get(), name, 0, XN_FLAG_ONELINE) < 0)
    return "?";
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

} // namespace

status init_ca(const std::string& dir, int64_t days) {
  if (days < 1)
    return status::error("the CA must be valid for at least 1 day");
  const issued_files to{(fs::path(dir) / "ca.crt").string(),
                        (fs::path(dir) / "ca.key").string()};
  std::error_code ec;
  if (fs::exists(to.cert, ec) || fs::exists(to.key, ec))
    return status::error(dir
                         + " already holds a CA (ca.crt or ca.key); "
                           "not overwriting it");
  fs::create_directories(dir, ec);
  if (ec)
    return status::error("cannot create " + dir + ": " + ec.message());
  auto key = new_ec_key();
  if (!key)
    return key.error();
  auto cert = new_certificate(key->get(), "ca", "tutti cluster CA", -60,
                              days * 86400);
  if (!cert)
    return cert.error();
  X509* c = cert->get();
  if (!X509_set_issuer_name(c, X509_get_subject_name(c)))
    return status::error("cannot set the issuer: " + openssl_error());
  TUTTI_RETURN_IF_ERROR(
    add_extension(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  TUTTI_RETURN_IF_ERROR(
    add_extension(c, c, NID_key_usage, "critical,keyCertSign,cRLSign"));
  TUTTI_RETURN_IF_ERROR(
    add_extension(c, c, NID_subject_key_identifier, "hash"));
  if (!X509_sign(c, key->get(), EVP_sha256()))
    return status::error("cannot sign the CA: " + openssl_error());
  TUTTI_RETURN_IF_ERROR(write_pair(c, key->get(), to));
  return write_empty_crl(dir);
}

expected<issued_files> issue_certificate(const std::string& ca_dir,
                                         const identity& who,
                                         int64_t lifetime_s,
                                         const std::string& out_dir,
                                         int64_t start_offset_s,
                                         const secret& passphrase) {
  if (lifetime_s < 1)
    return status::error("a certificate must be valid for some time");
  std::string unit, common, stem;
  if (who.kind == identity_kind::node) {
    if (who.node_rank < 0)
      return status::error("a node rank is >= 0");
    unit = "node";
    common = "node-" + std::to_string(who.node_rank);
    stem = common;
  } else {
    if (!known_role(who.role))
      return status::error("role '" + who.role
                           + "' is not one of viewer, operator, admin");
    if (who.user.empty()
        || who.user.find_first_of("/\\ \t\n,=+") != std::string::npos)
      return status::error("user name '" + who.user
                           + "' must be non-empty, without spaces, slashes, "
                             "',', '=' or '+'");
    unit = who.role;
    common = who.user;
    stem = "user-" + who.user;
  }
  auto ca_cert = read_certificate((fs::path(ca_dir) / "ca.crt").string());
  if (!ca_cert)
    return ca_cert.error();
  auto ca_key = read_private_key((fs::path(ca_dir) / "ca.key").string());
  if (!ca_key)
    return ca_key.error();
  if (X509_check_private_key(ca_cert->get(), ca_key->get()) != 1)
    return status::error("ca.key does not belong to ca.crt in " + ca_dir);
  auto key = new_ec_key();
  if (!key)
    return key.error();
  auto cert = new_certificate(key->get(), unit, common, start_offset_s,
                              lifetime_s);
  if (!cert)
    return cert.error();
  X509* c = cert->get();
  X509* issuer = ca_cert->get();
  if (!X509_set_issuer_name(c, X509_get_subject_name(issuer)))
    return status::error("cannot set the issuer: " + openssl_error());
  TUTTI_RETURN_IF_ERROR(
    add_extension(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  TUTTI_RETURN_IF_ERROR(
    add_extension(c, issuer, NID_key_usage, "critical,digitalSignature"));
  TUTTI_RETURN_IF_ERROR(add_extension(
    c, issuer, NID_ext_key_usage,
    who.kind == identity_kind::node ? "serverAuth,clientAuth" : "clientAuth"));
  TUTTI_RETURN_IF_ERROR(
    add_extension(c, issuer, NID_authority_key_identifier, "keyid:always"));
  // A node's name as a DNS name too: HTTPS clients (a Prometheus scraping
  // its /metrics with tls_config.server_name) check names there only.
  if (who.kind == identity_kind::node)
    TUTTI_RETURN_IF_ERROR(add_extension(c, issuer, NID_subject_alt_name,
                                        ("DNS:" + common).c_str()));
  if (!X509_sign(c, ca_key->get(), EVP_sha256()))
    return status::error("cannot sign the certificate: " + openssl_error());
  const auto dir = out_dir.empty() ? ca_dir : out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  issued_files to{(fs::path(dir) / (stem + ".crt")).string(),
                  (fs::path(dir) / (stem + ".key")).string()};
  TUTTI_RETURN_IF_ERROR(write_pair(c, key->get(), to, passphrase));
  return to;
}

expected<std::string> describe_certificate(const std::string& path) {
  auto cert = read_certificate(path);
  if (!cert)
    return cert.error();
  X509* c = cert->get();
  std::ostringstream out;
  out << "subject:   " << name_text(X509_get_subject_name(c)) << "\n";
  auto who = identity_of(c);
  out << "names:     "
      << (who ? who->text()
              : (X509_check_ca(c)
                   ? std::string("a certificate authority")
                   : "nothing tutti knows (" + who.message() + ")"))
      << "\n";
  out << "issuer:    " << name_text(X509_get_issuer_name(c)) << "\n";
  out << "valid:     " << time_text(X509_get0_notBefore(c)) << " .. "
      << time_text(X509_get0_notAfter(c));
  if (X509_cmp_current_time(X509_get0_notAfter(c)) < 0)
    out << " (EXPIRED)";
  else if (X509_cmp_current_time(X509_get0_notBefore(c)) > 0)
    out << " (NOT YET VALID)";
  out << "\n";
  BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(c), nullptr);
  char* hex = serial ? BN_bn2hex(serial) : nullptr;
  out << "serial:    " << (hex ? hex : "?") << "\n";
  OPENSSL_free(hex);
  BN_free(serial);
  EVP_PKEY* key = X509_get0_pubkey(c);
  char group[64] = "?";
  size_t group_len = 0;
  if (key)
    EVP_PKEY_get_group_name(key, group, sizeof(group), &group_len);
  out << "key:       EC " << group << " (" << (key ? EVP_PKEY_get_bits(key) : 0)
      << " bits)\n";
  const uint32_t usage = X509_get_extended_key_usage(c);
  if (X509_check_ca(c))
    out << "usage:     certificate authority\n";
  else
    out << "usage:     " << ((usage & XKU_SSL_SERVER) ? "server " : "")
        << ((usage & XKU_SSL_CLIENT) ? "client" : "") << "\n";
  return out.str();
}

expected<std::string> certificate_host_name(const std::string& path) {
  auto cert = read_certificate(path);
  if (!cert)
    return cert.error();
  auto* names = static_cast<GENERAL_NAMES*>(
    X509_get_ext_d2i(cert->get(), NID_subject_alt_name, nullptr, nullptr));
  std::string dns;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names) && dns.empty(); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_DNS)
      dns.assign(
        reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
        static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
  }
  GENERAL_NAMES_free(names);
  if (!dns.empty())
    return dns;
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert->get()),
                                NID_commonName, cn, sizeof(cn))
      <= 0)
    return status::error(path
                         + ": the certificate names no host (no DNS "
                           "name, no CN)");
  return std::string(cn);
}

} // namespace tutti::security
