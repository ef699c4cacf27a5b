// Security's commands: the cluster CA, the audit log, access tokens.

#include "command_table.hpp"
#include "commands.hpp"

namespace tutti::cli {

command_group security_commands() {
  static const std::vector<command> table = {
    {"certs",
     certs_command,
     {{"certs init|issue|show|revoke",
       "the cluster CA, node and user certificates"}}},
    {"audit",
     audit_command,
     {{"audit [list|verify] RUN_DIR",
       "operator actions and refusals; check the\nhash chain"}}},
    {"token",
     token_command,
     {{"token issue --policy FILE --user NAME --role ROLE",
       "an access token (only its hash is kept)"}}},
  };
  return table;
}

} // namespace tutti::cli
