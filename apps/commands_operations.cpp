// What an operator does to a job beside running it: config versions,
// rollback, routing statistics, expert placement and the run's report.

#include "command_table.hpp"
#include "commands.hpp"

namespace tutti::cli {

command_group operations_commands() {
  static const std::vector<command> table = {
    {"config",
     config_command,
     {{"config history|diff RUN_DIR ...",
       "a job's config versions and their changes"}}},
    {"rollback",
     rollback_command,
     {{"rollback RUN_DIR --to-version V [--checkpoint STEP]",
       "restart a job on an earlier config version"}}},
    {"experts",
     experts_command,
     {{"experts stats RUN_DIR|HOST:PORT [--json FILE]",
       "routing statistics: load, co-activation"}}},
    {"placement",
     placement_command,
     {{"placement plan CONFIG --stats STATS.json [--out PLAN]",
       "rack-aware expert placement"}}},
    {"report",
     report_command,
     {{"report RUN_DIR --out FILE",
       "one offline HTML file of a run: curves, heatmap, events"}}},
  };
  return table;
}

} // namespace tutti::cli
