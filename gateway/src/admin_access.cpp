#include "admin_access.hpp"

#include <httplib.h>

#include "proxy.hpp"
#include "tutti/security/access_policy.hpp"
#include "tutti/security/secret.hpp"

namespace tutti::gateway {

bool is_loopback_address(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1"
         || address.rfind("::ffff:127.", 0) == 0;
}

expected<admin_access> admin_access::open(const std::string& policy_path) {
  admin_access out;
  if (policy_path.empty())
    return out;
  auto policy = security::access_policy::open(policy_path);
  if (!policy)
    return policy.error().with_context("gateway.admin_policy: ");
  out.policy_ = *policy;
  return out;
}

bool admin_access::admit(const httplib::Request& req, httplib::Response& res,
                         const std::string& action) const {
  const auto authorization = req.get_header_value("Authorization");
  const bool bearer = authorization.rfind("Bearer ", 0) == 0;
  // A loopback client without a token is the operator on this host.
  if (is_loopback_address(req.remote_addr) && !(policy_ && bearer))
    return true;
  const std::string needed = security::required_role(action);
  if (!policy_) {
    send_error(res, 403,
               "/admin/ answers loopback clients only, not "
                 + req.remote_addr
                 + " (set gateway.admin_policy and present a token to steer "
                   "from elsewhere)",
               "permission_error");
    return false;
  }
  auto who = bearer ? policy_->token_identity(
                        security::secret(authorization.substr(7)))
                    : std::nullopt;
  if (!who) {
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, 401,
               std::string(bearer ? "the token is not one of "
                                    "gateway.admin_policy's"
                                  : "a token is needed from "
                                      + req.remote_addr)
                 + " (Authorization: Bearer TOKEN, role " + needed + ")",
               "authentication_error");
    return false;
  }
  const auto decision = policy_->decide(*who, action);
  if (!decision.allowed) {
    send_error(res, 403, decision.why, "permission_error");
    return false;
  }
  return true;
}

} // namespace tutti::gateway
