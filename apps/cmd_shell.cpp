// tutti shell [--connect HOST:PORT] [-c "CMD; CMD"] [--json] [--yes]: a
// REPL against a live job, through any of its daemons (or its config).
// Without --connect only the commands that need no job work (service,
// rollback RUN_DIR, help). On a
// terminal: line editing, history (~/.tutti_history, or
// $TUTTI_SHELL_HISTORY) and Tab completion of commands and actor paths.
// With -c, or stdin not a terminal: runs the commands and exits 0 only if
// all succeeded (1 when one was refused, 2 on a malformed command).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "command_line.hpp"
#include "commands.hpp"
#include "line_editor.hpp"
#include "shell_command.hpp"
#include "shell_session.hpp"

namespace tutti::cli {

namespace {

std::string history_path() {
  if (const char* p = std::getenv("TUTTI_SHELL_HISTORY"))
    return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.tutti_history";
}

int repl(shell_session& session, bool connected) {
  shell::line_editor editor(
    "tutti", history_path(), [&](const std::string& before) {
      return shell::complete_command_line(before, session.actor_paths());
    });
  if (!editor.history_problem().empty())
    std::fprintf(stderr, "tutti shell: history: %s\n",
                 editor.history_problem().c_str());
  std::printf("tutti shell: %s help lists the commands; quit ends.\n",
              connected ? "connected." : "");
  std::string line;
  bool quit = false;
  while (!quit && editor.read_line("tutti> ", line)) {
    editor.add_history(line);
    session.run(line, quit);
  }
  return 0;
}

int script(shell_session& session, const std::vector<std::string>& commands) {
  int worst = 0;
  for (const auto& c : commands) {
    bool quit = false;
    worst = std::max(worst, session.run(c, quit));
    if (quit)
      break;
  }
  return worst;
}

std::string command_list() {
  std::string out = "commands:\n";
  for (const auto& c : shell::shell_commands())
    out += "  " + c.usage + "\n";
  return out;
}

} // namespace

int shell_command(const std::vector<std::string>& args) {
  command_line cl("shell",
                  "[--connect HOST:PORT|CONFIG] [-c \"CMD; CMD\"] "
                  "[--json] [--yes]",
                  command_list());
  cl.options()("connect", po::value<std::string>(),
               "any daemon of the job, or its config")(
    "commands,c", po::value<std::string>(),
    "run these commands (';' between them) and exit")(
    "json", "answers as JSON")("yes", "do not ask before kill");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  const bool have_commands = vm.count("commands") > 0;
  const bool terminal = isatty(STDIN_FILENO) && !have_commands;
  // Without a job the shell still steers gateways and rolls stopped jobs
  // back; an interactive shell with nothing to connect to says how.
  if (!vm.count("connect") && terminal)
    std::printf("tutti shell: not connected to a job (--connect HOST:PORT "
                "or CONFIG); service and rollback RUN_DIR work without it.\n");
  client::job_client job;
  if (vm.count("connect"))
    if (auto s = job.connect(vm["connect"].as<std::string>()); !s)
      return fail(1, "shell: " + s.message());
  shell_session::catch_interrupts();
  shell_session session(vm.count("connect") ? &job : nullptr,
                        vm.count("json") > 0, vm.count("yes") > 0, terminal);
  if (have_commands)
    return script(session,
                  shell::split_commands(vm["commands"].as<std::string>()));
  if (terminal)
    return repl(session, vm.count("connect") > 0);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(std::cin, line))
    lines.push_back(line);
  return script(session, lines);
}

} // namespace tutti::cli
