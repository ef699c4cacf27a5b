#pragma once
// Operators' access, checked where the action happens: each shell command,
// fault and status request is allowed or refused by the sender's
// certificate and the access policy (security/access_policy.hpp), and
// every operator action and every refusal becomes an audit record.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_state.hpp"

namespace tutti {

// The node of the current message's sender. Read it before making a
// response promise, which takes the sender out of the message.
caf::node_id sender_node(coordinator_pointer self);
// Who is on `node`, if it is known already (an actor of this process, or a
// node seen before).
std::optional<sender_identity> known_sender(coordinator_pointer self,
                                            const caf::node_id& node);
// Asks the middleman who is on `node`, remembers it, then calls `then`.
void learn_sender(coordinator_pointer self, const caf::node_id& node,
                  std::function<void()> then);

// Allowed or refused (with the role needed). Without TLS nobody is
// authenticated and everything is allowed, as before security existed.
security::access_decision check_access(coordinator_pointer self,
                                       const sender_identity& from,
                                       const std::string& command);

// One audit record (operator-level actions and every refusal).
void audit(coordinator_pointer self, const sender_identity& from,
           const security::access_decision& d, const std::string& command,
           const std::string& target, const std::string& result);

// The shell's commands and faults behind the check.
caf::result<shell_reply> guarded_shell_command(
  coordinator_pointer self, const std::string& command,
  const std::vector<std::string>& args);
caf::result<std::string> guarded_chaos(coordinator_pointer self,
                                       const chaos_request& req);
caf::result<job_status> guarded_status(coordinator_pointer self);

} // namespace tutti
