// The gateway's commands: one endpoint in front of serving replicas, and
// its rollout steered.

#include "command_table.hpp"
#include "commands.hpp"

namespace tutti::cli {

command_group gateway_commands() {
  static const std::vector<command> table = {
    {"gateway",
     gateway_command,
     {{"gateway CONFIG [--listen HOST:PORT]",
       "one endpoint in front of serve replicas"}}},
    {"rollout",
     rollout_command,
     {{"rollout status|events|promote|rollback HOST:PORT [--token-file F]",
       "a gateway's rollout, shown and steered"}}},
  };
  return table;
}

} // namespace tutti::cli
