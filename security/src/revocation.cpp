#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <filesystem>

#include "openssl_util.hpp"
#include "tutti/security/certs.hpp"

namespace tutti::security {

namespace {

using namespace detail;
namespace fs = std::filesystem;
using crl_ptr = std::unique_ptr<X509_CRL, deleter<X509_CRL_free>>;
using revoked_ptr = std::unique_ptr<X509_REVOKED, deleter<X509_REVOKED_free>>;

// Writes DIR/ca.crl: every entry of the existing list (if any), plus
// `serial` when given, signed by the CA, valid as long as the CA is.
status write_crl(const std::string& ca_dir, const ASN1_INTEGER* serial) {
  auto ca_cert = read_certificate((fs::path(ca_dir) / "ca.crt").string());
  if (!ca_cert)
    return ca_cert.error();
  auto ca_key = read_private_key((fs::path(ca_dir) / "ca.key").string());
  if (!ca_key)
    return ca_key.error();
  if (X509_check_private_key(ca_cert->get(), ca_key->get()) != 1)
    return status::error("ca.key does not belong to ca.crt in " + ca_dir);
  const auto path = crl_path(ca_dir);
  crl_ptr crl(X509_CRL_new());
  std::unique_ptr<ASN1_TIME, deleter<ASN1_TIME_free>> now(
    X509_gmtime_adj(nullptr, 0));
  if (!crl || !now || !X509_CRL_set_version(crl.get(), X509_CRL_VERSION_2)
      || !X509_CRL_set_issuer_name(crl.get(),
                                   X509_get_subject_name(ca_cert->get()))
      || !X509_CRL_set1_lastUpdate(crl.get(), now.get())
      || !X509_CRL_set1_nextUpdate(crl.get(),
                                   X509_get0_notAfter(ca_cert->get())))
    return status::error("cannot make a revocation list: " + openssl_error());
  if (fs::exists(path)) {
    bio_ptr in(BIO_new_file(path.c_str(), "r"));
    crl_ptr old(in ? PEM_read_bio_X509_CRL(in.get(), nullptr, nullptr, nullptr)
                   : nullptr);
    if (!old)
      return status::error("cannot read " + path + ": " + openssl_error());
    STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(old.get());
    for (int i = 0; i < sk_X509_REVOKED_num(entries); ++i) {
      const X509_REVOKED* entry = sk_X509_REVOKED_value(entries, i);
      if (serial
          && ASN1_INTEGER_cmp(X509_REVOKED_get0_serialNumber(entry), serial)
               == 0)
        serial = nullptr; // already listed
      revoked_ptr copy(X509_REVOKED_dup(entry));
      if (!copy || !X509_CRL_add0_revoked(crl.get(), copy.get()))
        return status::error("cannot copy a revocation: " + openssl_error());
      copy.release();
    }
  }
  if (serial) {
    revoked_ptr entry(X509_REVOKED_new());
    if (!entry
        || !X509_REVOKED_set_serialNumber(entry.get(),
                                          const_cast<ASN1_INTEGER*>(serial))
        || !X509_REVOKED_set_revocationDate(entry.get(), now.get())
        || !X509_CRL_add0_revoked(crl.get(), entry.get()))
      return status::error("cannot add the revocation: " + openssl_error());
    entry.release();
  }
  if (!X509_CRL_sort(crl.get())
      || !X509_CRL_sign(crl.get(), ca_key->get(), EVP_sha256()))
    return status::error("cannot sign the revocation list: " + openssl_error());
  bio_ptr out(BIO_new(BIO_s_mem()));
  if (!out || !PEM_write_bio_X509_CRL(out.get(), crl.get()))
    return status::error("cannot write PEM: " + openssl_error());
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return write_file(path, std::string(data, static_cast<size_t>(n)), 0644);
}

} // namespace

std::string crl_path(const std::string& ca_dir) {
  return (fs::path(ca_dir) / "ca.crl").string();
}

status write_empty_crl(const std::string& ca_dir) {
  return write_crl(ca_dir, nullptr);
}

expected<std::string> revoke_certificate(const std::string& ca_dir,
                                         const std::string& cert_path) {
  auto cert = read_certificate(cert_path);
  if (!cert)
    return cert.error();
  auto ca_cert = read_certificate((fs::path(ca_dir) / "ca.crt").string());
  if (!ca_cert)
    return ca_cert.error();
  if (X509_check_issued(ca_cert->get(), cert->get()) != X509_V_OK)
    return status::error(cert_path + " was not issued by the CA in " + ca_dir);
  TUTTI_RETURN_IF_ERROR(write_crl(ca_dir, X509_get0_serialNumber(cert->get())));
  return crl_path(ca_dir);
}

} // namespace tutti::security
