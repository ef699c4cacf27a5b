#include "tutti/security/secret.hpp"

#include <openssl/crypto.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

namespace tutti::security {

secret::~secret() {
  // Scrub the bytes before the allocation goes back.
  if (!value_.empty())
    OPENSSL_cleanse(value_.data(), value_.size());
}

expected<secret> secret_from_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return status::error("cannot read secret file " + path);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return status::error("secret file " + path
                         + " is readable by others (chmod 600 it)");
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty())
    return status::error("secret file " + path + " is empty");
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  return secret(std::move(line));
}

expected<secret> secret_from_env(const std::string& variable) {
  const char* value = std::getenv(variable.c_str());
  if (!value || !*value)
    return status::error("environment variable " + variable + " is not set");
  return secret(value);
}

} // namespace tutti::security
