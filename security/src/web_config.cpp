#include "tutti/security/web_config.hpp"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "openssl_util.hpp"

namespace tutti::security {

namespace {

using namespace detail;

status check_keys(const YAML::Node& node, const std::string& prefix,
                  const std::set<std::string>& known) {
  if (!node.IsMap())
    return status::error(prefix + ": must be a mapping");
  for (const auto& entry : node) {
    const auto key = entry.first.as<std::string>();
    if (!known.count(key))
      return status::error(prefix + "." + key + ": unknown key");
  }
  return {};
}

bool is_bcrypt(const std::string& hash) {
  return hash.size() == 60
         && (hash.rfind("$2b$", 0) == 0 || hash.rfind("$2y$", 0) == 0
             || hash.rfind("$2a$", 0) == 0);
}

// `password` hashed with `hash`'s salt and cost equals `hash`.
bool bcrypt_matches(const std::string& password, const std::string& hash) {
  crypt_data data{};
  const char* out = crypt_rn(password.c_str(), hash.c_str(), &data,
                             sizeof(data));
  return out && std::string(out).size() == hash.size()
         && CRYPTO_memcmp(out, hash.data(), hash.size()) == 0;
}

std::string base64_decode(const std::string& text) {
  if (text.empty() || text.size() % 4 != 0 || text.size() > 4096)
    return "";
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(
    reinterpret_cast<unsigned char*>(out.data()),
    reinterpret_cast<const unsigned char*>(text.data()),
    static_cast<int>(text.size()));
  if (n < 0)
    return "";
  size_t pad = 0;
  while (pad < 2 && text[text.size() - 1 - pad] == '=')
    ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

} // namespace

expected<web_config> load_web_config(const std::string& path) {
  web_config out;
  try {
    const YAML::Node root = YAML::LoadFile(path);
    if (root.IsNull())
      return out;
    TUTTI_RETURN_IF_ERROR(
      check_keys(root, path, {"tls_server_config", "basic_auth_users"}));
    if (const auto tls = root["tls_server_config"]) {
      const auto where = path + ": tls_server_config";
      TUTTI_RETURN_IF_ERROR(
        check_keys(tls, where,
                   {"cert_file", "key_file", "client_ca_file",
                    "client_auth_type", "min_version"}));
      // Relative paths are relative to the file, as in Prometheus.
      const auto base = std::filesystem::path(path).parent_path();
      auto file = [&](const char* key) -> std::string {
        if (!tls[key])
          return "";
        return (base / tls[key].as<std::string>()).string();
      };
      out.cert_file = file("cert_file");
      out.key_file = file("key_file");
      out.client_ca_file = file("client_ca_file");
      if (out.cert_file.empty() || out.key_file.empty())
        return status::error(where + ": cert_file and key_file are required");
      if (const auto type = tls["client_auth_type"]) {
        const auto t = type.as<std::string>();
        if (t == "NoClientCert")
          out.client_ca_file.clear();
        else if (t != "RequireAndVerifyClientCert")
          return status::error(where + ".client_auth_type: '" + t
                               + "' is not NoClientCert or "
                                 "RequireAndVerifyClientCert");
        else if (out.client_ca_file.empty())
          return status::error(where + ".client_auth_type: " + t
                               + " needs client_ca_file");
      }
      if (const auto v = tls["min_version"]) {
        const auto t = v.as<std::string>();
        if (t != "TLS12" && t != "TLS13")
          return status::error(where + ".min_version: '" + t
                               + "' is not TLS12 or TLS13");
        out.tls13_only = t == "TLS13";
      }
    }
    if (const auto users = root["basic_auth_users"]) {
      if (!users.IsMap())
        return status::error(path
                             + ": basic_auth_users must map a user to "
                               "a bcrypt hash");
      for (const auto& entry : users) {
        const auto user = entry.first.as<std::string>();
        const auto hash = entry.second.as<std::string>();
        if (user.empty() || user.find(':') != std::string::npos)
          return status::error(path
                               + ": basic_auth_users: a user name is "
                                 "non-empty and has no ':'");
        if (!is_bcrypt(hash))
          return status::error(path + ": basic_auth_users." + user
                               + ": not a bcrypt hash ($2b$/$2y$...)");
        out.users[user] = hash;
      }
    }
  } catch (const YAML::Exception& ex) {
    return status::error(path + ": " + ex.what());
  }
  return out;
}

bool basic_auth_allows(const web_config& config,
                       const std::string& authorization) {
  if (config.users.empty())
    return true;
  const std::string scheme = "Basic ";
  if (authorization.size() <= scheme.size()
      || authorization.compare(0, scheme.size(), scheme) != 0)
    return false;
  const auto decoded = base64_decode(authorization.substr(scheme.size()));
  const auto colon = decoded.find(':');
  if (colon == std::string::npos)
    return false;
  const auto user = config.users.find(decoded.substr(0, colon));
  if (user == config.users.end())
    return false;
  return bcrypt_matches(decoded.substr(colon + 1), user->second);
}

status configure_server_tls(const web_config& config, SSL_CTX& ctx) {
  SSL_CTX* c = &ctx;
  if (SSL_CTX_set_min_proto_version(c, config.tls13_only ? TLS1_3_VERSION
                                                         : TLS1_2_VERSION)
        != 1
      || SSL_CTX_use_certificate_chain_file(c, config.cert_file.c_str()) != 1)
    return status::error("tls_server_config.cert_file " + config.cert_file
                         + ": " + openssl_error());
  auto key = read_private_key(config.key_file);
  if (!key)
    return key.error();
  if (SSL_CTX_use_PrivateKey(c, key->get()) != 1
      || SSL_CTX_check_private_key(c) != 1)
    return status::error("tls_server_config.key_file " + config.key_file + ": "
                         + openssl_error());
  SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (!config.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(c, config.client_ca_file.c_str(), nullptr)
        != 1)
      return status::error("tls_server_config.client_ca_file "
                           + config.client_ca_file + ": " + openssl_error());
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       nullptr);
  }
  return {};
}

expected<std::shared_ptr<SSL_CTX>> server_tls_context(
  const web_config& config) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx)
    return status::error("cannot make a TLS context: " + openssl_error());
  TUTTI_RETURN_IF_ERROR(configure_server_tls(config, *ctx));
  return ctx;
}

} // namespace tutti::security
