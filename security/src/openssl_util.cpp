#include "openssl_util.hpp"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

namespace tutti::security {

std::string identity::text() const {
  if (kind == identity_kind::node)
    return "node " + std::to_string(node_rank);
  return "user " + user + " (" + role + ")";
}

bool known_role(const std::string& role) {
  return role == "viewer" || role == "operator" || role == "admin";
}

namespace detail {

std::string openssl_error(const std::string& fallback) {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0)
    return fallback;
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

expected<x509_ptr> read_certificate(const std::string& path) {
  bio_ptr in(BIO_new_file(path.c_str(), "r"));
  if (!in)
    return status::error("cannot read certificate " + path + ": "
                         + openssl_error());
  x509_ptr cert(PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr));
  if (!cert)
    return status::error(path
                         + " holds no PEM certificate: " + openssl_error());
  return cert;
}

namespace {

// OpenSSL asks for the passphrase through a callback; it never sees a
// flag or an environment variable itself.
int give_passphrase(char* buf, int size, int, void* user) {
  const auto* pass = static_cast<const secret*>(user);
  if (!pass || pass->empty())
    return 0;
  const auto& text = pass->reveal();
  const int n = static_cast<int>(
    std::min<size_t>(text.size(), static_cast<size_t>(size)));
  std::memcpy(buf, text.data(), static_cast<size_t>(n));
  return n;
}

} // namespace

expected<pkey_ptr> read_private_key(const std::string& path,
                                    const secret* passphrase) {
  bio_ptr in(BIO_new_file(path.c_str(), "r"));
  if (!in)
    return status::error("cannot read key " + path + ": " + openssl_error());
  pkey_ptr key(PEM_read_bio_PrivateKey(in.get(), nullptr, give_passphrase,
                                       const_cast<secret*>(passphrase)));
  if (!key)
    return status::error(path + " holds no PEM private key that can be read ("
                         + (passphrase && !passphrase->empty()
                              ? "wrong passphrase?"
                              : "encrypted without a passphrase "
                                "given?")
                         + "): " + openssl_error());
  return key;
}

status write_file(const std::string& path, const std::string& pem,
                  unsigned mode) {
  const auto temp = path + ".tmp";
  ::unlink(temp.c_str());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                  static_cast<mode_t>(mode));
  if (fd < 0)
    return status::error("cannot write " + temp + ": " + std::strerror(errno));
  const char* p = pem.data();
  size_t left = pem.size();
  while (left > 0) {
    auto n = ::write(fd, p, left);
    if (n <= 0) {
      auto why = std::string(std::strerror(errno));
      ::close(fd);
      ::unlink(temp.c_str());
      return status::error("cannot write " + temp + ": " + why);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // The umask must not widen or narrow what was asked for.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0 || ::fsync(fd) != 0
      || ::close(fd) != 0) {
    ::unlink(temp.c_str());
    return status::error("cannot write " + temp + ": " + std::strerror(errno));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    auto why = std::string(std::strerror(errno));
    ::unlink(temp.c_str());
    return status::error("cannot rename " + temp + " to " + path + ": " + why);
  }
  return {};
}

namespace {

std::string subject_entry(X509_NAME* name, int nid) {
  int at = X509_NAME_get_index_by_NID(name, nid, -1);
  if (at < 0)
    return "";
  auto* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at));
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0)
    return "";
  std::string out(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  return out;
}

} // namespace

expected<identity> identity_of(X509* cert) {
  X509_NAME* name = X509_get_subject_name(cert);
  if (!name)
    return status::error("certificate without a subject");
  const auto unit = subject_entry(name, NID_organizationalUnitName);
  const auto common = subject_entry(name, NID_commonName);
  identity who;
  if (unit == "node") {
    who.kind = identity_kind::node;
    const std::string prefix = "node-";
    if (common.rfind(prefix, 0) != 0)
      return status::error("node certificate's CN '" + common
                           + "' is not node-N");
    try {
      size_t used = 0;
      who.node_rank = std::stoll(common.substr(prefix.size()), &used);
      if (used != common.size() - prefix.size() || who.node_rank < 0)
        throw std::invalid_argument(common);
    } catch (const std::exception&) {
      return status::error("node certificate's CN '" + common
                           + "' is not node-N");
    }
    return who;
  }
  if (!known_role(unit))
    return status::error("certificate's OU '" + unit
                         + "' is neither node nor a role");
  if (common.empty())
    return status::error("user certificate without a CN");
  who.kind = identity_kind::user;
  who.user = common;
  who.role = unit;
  return who;
}

} // namespace detail
} // namespace tutti::security
