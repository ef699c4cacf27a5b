#pragma once
// Who may do what. Three roles, each including the one before:
//   viewer    status, nodes, actors, experts, metrics, events, logs, audit
//   operator  also pause, resume, checkpoint, kill, restart, drain, stop,
//             chaos, rollback, promote (a gateway's canary)
//   admin     also certificates and policy (and any command not listed:
//             deny by default)
// A user's role is the one their certificate names, limited by the policy
// file when there is one: a user it does not list, or lists as revoked,
// holds no role. The file is re-read when it changes (no restart):
//
//   users:            # user: the most they may do
//     vera: viewer
//     otto: operator
//   revoked: [mallory]
//   tokens:           # SHA-256 of each admin-issued token, never the token
//     9f86d0...: {user: ci, role: viewer}
//
// A token (`tutti token issue`) stands in for a user certificate: a client
// without one presents it after the TLS handshake, and holds the token's
// user and role (limited by `users:` as a certificate's would be).

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/security/identity.hpp"
#include "tutti/security/secret.hpp"

namespace tutti::security {

// 0 none, 1 viewer, 2 operator, 3 admin.
int role_rank(const std::string& role);
// The least role `command` needs.
std::string required_role(const std::string& command);

struct access_decision {
  bool allowed = false;
  std::string role;   // the role the caller holds ("" none)
  std::string needed; // the role the command needs
  std::string why;    // refused: one line naming the role needed
};

class access_policy {
public:
  // `path` empty: certificate roles as they are. Fails when the file is
  // there but unreadable or malformed.
  static expected<std::shared_ptr<access_policy>> open(const std::string& path);

  access_decision decide(const identity& who, const std::string& command);
  // The user a token names (the file as it is now), or nothing.
  std::optional<identity> token_identity(const secret& token);

private:
  explicit access_policy(std::string path) : path_(std::move(path)) {}
  status reload_if_changed();

  struct rules;
  std::string path_;
  std::mutex mutex_;
  std::shared_ptr<const rules> rules_;
  std::string stamp_;
};

// Makes a new random token for `user` with `role`, adds its SHA-256 (and
// the user, if the policy does not list them yet) to the policy file at
// `path` (created if missing, mode 0600), and returns the token: the one
// time it is shown.
expected<secret> issue_token(const std::string& path, const std::string& user,
                             const std::string& role);

} // namespace tutti::security
