#pragma once
// The client half of `tutti rollout status|events|promote|rollback
// HOST:PORT`, shared by the command and the shell's `service`: one HTTP
// request to a gateway's /admin/ endpoint, with an access token when there
// is one (the gateway lets loopback clients in without one; others need a
// token of its gateway.admin_policy, an operator's to promote or roll back).

#include <string>

namespace tutti::cli {

struct gateway_admin_answer {
  int exit_status = 0; // 0 done, 1 failed or refused, 2 bad input, or 409
  std::string text;    // the gateway's JSON, or one line saying what failed
};

// `action`: status, events, promote or rollback. `token_file`: a 0600 file
// holding the token; "" takes TUTTI_TOKEN_FILE or TUTTI_TOKEN as the job
// clients do, or none.
gateway_admin_answer gateway_admin_request(const std::string& action,
                                           const std::string& address,
                                           const std::string& token_file);

} // namespace tutti::cli
