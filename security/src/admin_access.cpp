#include "tutti/security/admin_access.hpp"

#include "tutti/security/access_policy.hpp"
#include "tutti/security/secret.hpp"

namespace tutti::security {

bool is_loopback_address(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1"
         || address.rfind("::ffff:127.", 0) == 0;
}

expected<admin_access> admin_access::open(const std::string& policy_path,
                                          const std::string& key) {
  admin_access out;
  out.key_ = key;
  if (policy_path.empty())
    return out;
  auto policy = access_policy::open(policy_path);
  if (!policy)
    return policy.error().with_context(key + ": ");
  out.policy_ = *policy;
  return out;
}

admission admin_access::admit(bool local, const std::string& peer,
                              const std::string& authorization,
                              const std::string& action) const {
  const bool bearer = authorization.rfind("Bearer ", 0) == 0;
  // A client on this machine without a token is the operator on the host.
  if (local && !(policy_ && bearer))
    return {};
  const std::string needed = required_role(action);
  if (!policy_)
    return {403,
            "/admin/ answers loopback clients only, not " + peer + " (set "
              + key_ + " and present a token to steer from elsewhere)",
            "permission_error"};
  auto who = bearer ? policy_->token_identity(secret(authorization.substr(7)))
                    : std::nullopt;
  if (!who)
    return {401,
            std::string(bearer ? "the token is not one of " + key_ + "'s"
                               : "a token is needed from " + peer)
              + " (Authorization: Bearer TOKEN, role " + needed + ")",
            "authentication_error"};
  const auto decision = policy_->decide(*who, action);
  if (!decision.allowed)
    return {403, decision.why, "permission_error"};
  return {};
}

} // namespace tutti::security
