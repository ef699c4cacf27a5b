#include "tutti/security/file_digest.hpp"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "openssl_util.hpp"

namespace tutti::security {

expected<std::string> sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return status::error(path.string() + ": cannot be read");
  std::unique_ptr<EVP_MD_CTX, detail::deleter<EVP_MD_CTX_free>> ctx(
    EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return status::error(path.string() + ": sha256: "
                         + detail::openssl_error());
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = in.gcount();
    if (n > 0
        && EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(n))
             != 1)
      return status::error(path.string() + ": sha256: "
                           + detail::openssl_error());
  }
  if (in.bad())
    return status::error(path.string() + ": read failed");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1)
    return status::error(path.string() + ": sha256: "
                         + detail::openssl_error());
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

} // namespace tutti::security
