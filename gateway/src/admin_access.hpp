#pragma once
// Who may use the gateway's /admin/ endpoints (status, events, promote,
// rollback): loopback clients without a token always (the operator on the
// gateway's host; one that sends a bad token is refused); others only with an access token of gateway.admin_policy (a
// policy file as security.policy, `tutti token issue`) sent as
// `Authorization: Bearer TOKEN`, holding the role the action needs
// (security::required_role: viewer to look, operator to promote or roll
// back). Without admin_policy, non-loopback clients are refused: /admin/
// is no open control port.

#include <memory>
#include <string>

#include "tutti/base/status.hpp"

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace tutti::security {
class access_policy;
}

namespace tutti::gateway {

class admin_access {
public:
  // `policy_path` "" : loopback only. Fails naming the file when it is
  // there but malformed.
  static expected<admin_access> open(const std::string& policy_path);

  // True to go on; else `res` holds the refusal (401 without a known
  // token, 403 from a non-loopback peer or with too small a role), in the
  // gateway's error shape, one line saying why.
  bool admit(const httplib::Request& req, httplib::Response& res,
             const std::string& action) const;

private:
  std::shared_ptr<security::access_policy> policy_; // null: none configured
};

// 127.0.0.0/8, ::1 and IPv4-mapped loopback.
bool is_loopback_address(const std::string& address);

} // namespace tutti::gateway
