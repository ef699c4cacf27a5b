// NAME@VERSION and its parts.

#include "tutti/config/version_ref.hpp"

#include <cctype>

namespace tutti {

status check_version_part(const std::string& what, const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.')
    return status::error(what + " must be 1..128 characters, not starting "
                                "with '.', got '"
                         + s + "'");
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-'
          || c == '_'))
      return status::error(what + " may hold only letters, digits, '.', '-' "
                                  "and '_', got '"
                           + s + "'");
  return {};
}

status parse_version_ref(const std::string& ref, std::string& name,
                         std::string& version) {
  const auto at = ref.find('@');
  if (at == std::string::npos)
    return status::error("must be NAME@VERSION, got '" + ref + "'");
  name = ref.substr(0, at);
  version = ref.substr(at + 1);
  TUTTI_RETURN_IF_ERROR(check_version_part("the name", name));
  return check_version_part("the version", version);
}

} // namespace tutti
