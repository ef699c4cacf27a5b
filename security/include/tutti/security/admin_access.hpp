#pragma once
// Who may use an HTTP front's /admin/ endpoints (a gateway's status,
// events, promote, rollback; a served model's shell and chaos): a client
// on this machine without a token always (the operator on the host; one
// that sends a token has it checked); others only with an access token of
// the front's admin policy (a policy file as security.policy, `tutti token
// issue`) sent as `Authorization: Bearer TOKEN`, holding the role the
// action needs (required_role: viewer to look, operator to steer). Without
// a policy, other clients are refused: /admin/ is no open control port.
//
// The verdict is a value; each front answers it in its own error shape.

#include <memory>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::security {

class access_policy;

struct admission {
  int http_status = 200; // 200 admitted; 401 no known token; 403 refused
  std::string message;   // one line: why not
  std::string type;      // "authentication_error" or "permission_error"
  bool admitted() const { return http_status == 200; }
};

class admin_access {
public:
  // `policy_path` "": this machine's clients only. `key` names the config
  // key in messages ("gateway.admin_policy"). Fails naming the file when it
  // is there but malformed.
  static expected<admin_access> open(const std::string& policy_path,
                                     const std::string& key);

  // `local`: the peer is on this machine (the front decides what counts);
  // `peer`: its address, for messages; `authorization`: the request's
  // Authorization header; `action`: the command (required_role).
  admission admit(bool local, const std::string& peer,
                  const std::string& authorization,
                  const std::string& action) const;

private:
  std::shared_ptr<access_policy> policy_; // null: none configured
  std::string key_;
};

// 127.0.0.0/8, ::1 and IPv4-mapped loopback.
bool is_loopback_address(const std::string& address);

} // namespace tutti::security
