// The commands that talk to a live job or service.

#include "command_table.hpp"
#include "commands.hpp"

namespace tutti::cli {

command_group client_commands() {
  static const std::vector<command> table = {
    {"status",
     status_command,
     {{"status CONFIG|HOST:PORT [--json]",
       "a live job: state, step, loss, recoveries"}}},
    {"chaos",
     chaos_command,
     {{"chaos CONFIG|HOST:PORT FAULT [--rank R] [--node N] [--seconds S]",
       "inject a fault into a live job"}}},
    {"shell",
     shell_command,
     {{"shell [--connect HOST:PORT] [-c \"CMD; CMD\"] [--json]",
       "watch and steer a live job (any daemon),\n"
       "a gateway (service), a stopped job (rollback)"}}},
    {"logs",
     logs_command,
     {{"logs CONFIG|HOST:PORT [--node N] [--level L] [--follow]",
       "every daemon's log, merged by time"}}},
  };
  return table;
}

} // namespace tutti::cli
