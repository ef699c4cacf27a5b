#pragma once
// The one table of `tutti`'s commands. Each command is declared once, in
// the group file of the part it belongs to (commands_*.cpp): its name, the
// function that runs it and its lines in the overview. A program's main
// is a list of groups: `tutti` takes them all, `tutti-serve` and
// `tutti-gateway` only theirs (so they link no training part).

#include <span>
#include <string>
#include <vector>

namespace tutti::cli {

// One line of the overview: "ckpt list RUN_DIR" and what it does.
struct usage_line {
  const char* synopsis;
  const char* summary;
};

struct command {
  const char* name;
  int (*run)(const std::vector<std::string>& args);
  std::vector<usage_line> lines;
};

using command_group = std::span<const command>;

// The groups, by part.
command_group job_commands();      // training: run, plan, ckpt, data, ...
command_group client_commands();   // a live job: status, shell, logs, ...
command_group serve_commands();    // serve, bench serve, sample, publish
command_group gateway_commands();  // gateway, service
command_group security_commands(); // certs, audit, token
command_group operations_commands(); // config, rollback, experts, placement

// Runs argv[1] from `groups`: no command prints the overview to stderr
// (exit 2), --help to stdout (exit 0); an unknown one is refused in one
// line listing the known; an exception is a failure (exit 1).
int run_program(const char* program, std::vector<command_group> groups,
                int argc, char** argv);

} // namespace tutti::cli
