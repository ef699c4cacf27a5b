#pragma once
// Who a certificate names. Node certificates have the subject
// "O=tutti, OU=node, CN=node-N"; user certificates "O=tutti, OU=ROLE,
// CN=NAME" with ROLE viewer, operator or admin.

#include <cstdint>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::security {

enum class identity_kind { node, user };

struct identity {
  identity_kind kind = identity_kind::user;
  int64_t node_rank = -1; // nodes
  std::string user;       // users
  std::string role;       // users: viewer, operator, admin

  // "node 1" or "user alice (operator)".
  std::string text() const;
};

// viewer, operator, admin.
bool known_role(const std::string& role);

} // namespace tutti::security
