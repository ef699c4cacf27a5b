// tutti shell --connect HOST:PORT [-c "CMD; CMD"] [--json] [--yes]: a REPL
// against a live job, through any of its daemons (or its config). On a
// terminal: line editing, history (~/.tutti_history, or
// $TUTTI_SHELL_HISTORY) and Tab completion of commands and actor paths.
// With -c, or stdin not a terminal: runs the commands and exits 0 only if
// all succeeded (1 when one was refused, 2 on a malformed command).
// tutti logs TARGET [--node N] [--level L] [--lines N] [--follow] is the
// shell's logs command on its own.

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "commands.hpp"
#include "coordinator_client.hpp"
#include "line_editor.hpp"
#include "shell_command.hpp"
#include "tutti/actors/system_config.hpp"
#include "tutti/render/shell.hpp"

namespace tutti::cli {

namespace {

std::atomic<bool> interrupted{false};
void on_interrupt(int) { interrupted = true; }

// The coordinator, from a config, its own address, or any daemon's address
// (a node daemon hands out the coordinator's handle).
std::string connect_any(caf::actor_system& sys, const std::string& target,
                        coordinator_actor& out) {
  auto direct = connect_coordinator(sys, target, out);
  if (direct.empty())
    return "";
  auto colon = target.rfind(':');
  if (colon == std::string::npos)
    return direct;
  auto node = sys.middleman().remote_actor<node_supervisor_actor>(
    target.substr(0, colon),
    static_cast<uint16_t>(std::atoi(target.c_str() + colon + 1)));
  if (!node)
    return direct;
  caf::scoped_actor self{sys};
  std::string error = "the daemon at " + target + " did not answer";
  self->request(*node, std::chrono::seconds(5), get_coordinator_atom_v)
    .receive(
      [&](caf::actor& h) {
        out = caf::actor_cast<coordinator_actor>(h);
        error.clear();
      },
      [&](caf::error& err) { error = sys.render(err); });
  return error;
}

class shell_session {
public:
  shell_session(caf::actor_system& sys, coordinator_actor coordinator,
                bool json, bool yes, bool interactive)
    : sys_(sys), self_(sys), coordinator_(std::move(coordinator)),
      json_(json), yes_(yes), interactive_(interactive) {}

  // 0 ok, 1 refused or failed, 2 malformed; `quit` set by quit/exit.
  int run(const std::string& line, bool& quit) {
    std::string error;
    auto cmd = shell::parse_command(line, error);
    if (!error.empty()) {
      std::fprintf(stderr, "tutti shell: %s\n", error.c_str());
      return 2;
    }
    if (cmd.name.empty())
      return 0;
    if (cmd.name == "quit" || cmd.name == "exit") {
      quit = true;
      return 0;
    }
    if (cmd.name == "help")
      return help(cmd);
    if (cmd.name == "kill" && !confirm("kill " + cmd.args[0]))
      return 1;
    std::vector<std::string> args = cmd.args;
    if (cmd.name == "events") {
      auto since = cmd.options.count("since")
                     ? shell::duration_seconds(cmd.options["since"])
                     : std::optional<double>(0);
      // At most ten years back: the event log is younger than that.
      const double seconds = std::min(since.value_or(0), 3.2e8);
      args = {std::to_string(static_cast<int64_t>(seconds))};
    }
    if (cmd.name == "logs") {
      args = {cmd.options["node"], cmd.options["level"], cmd.options["lines"]};
      if (cmd.options.count("follow"))
        return follow_logs(args);
    }
    return ask(cmd.name, args);
  }

  std::vector<std::string> actor_paths() {
    const auto now = std::chrono::steady_clock::now();
    if (now - paths_at_ < std::chrono::seconds(2))
      return paths_;
    paths_at_ = now;
    shell_reply reply;
    if (request("actors", {}, reply) && reply.ok) {
      paths_.clear();
      for (const auto& a : reply.actors)
        paths_.push_back(a.path);
    }
    return paths_;
  }

private:
  bool request(const std::string& name, const std::vector<std::string>& args,
               shell_reply& out) {
    bool ok = false;
    self_->request(coordinator_, std::chrono::seconds(15), shell_atom_v, name,
                   args)
      .receive(
        [&](shell_reply& r) {
          out = std::move(r);
          ok = true;
        },
        [&](caf::error& err) {
          out = shell_reply{};
          out.ok = false;
          out.error = "lost the coordinator: " + sys_.render(err);
        });
    return ok;
  }

  int ask(const std::string& name, const std::vector<std::string>& args) {
    shell_reply reply;
    request(name, args, reply);
    if (!reply.ok) {
      std::fprintf(stderr, "tutti shell: %s",
                   render::shell_text(name, reply).c_str());
      return 1;
    }
    std::fputs(json_ ? (render::shell_json(name, reply) + "\n").c_str()
                     : render::shell_text(name, reply).c_str(),
               stdout);
    std::fflush(stdout);
    return 0;
  }

  int help(const shell::parsed_command& cmd) {
    for (const auto& c : shell::shell_commands())
      if (cmd.args.empty() || c.name == cmd.args[0])
        std::printf("  %-44s %s\n", c.usage.c_str(), c.help.c_str());
    return 0;
  }

  bool confirm(const std::string& what) {
    if (yes_)
      return true;
    if (!interactive_) {
      std::fprintf(stderr,
                   "tutti shell: %s asks for confirmation: add --yes\n",
                   what.c_str());
      return false;
    }
    std::printf("%s? this injects a fault into the live job [y/N] ",
                what.c_str());
    std::fflush(stdout);
    std::string answer;
    if (!std::getline(std::cin, answer))
      return false;
    return answer == "y" || answer == "yes";
  }

  // Prints new lines every second until interrupted (Ctrl-C).
  int follow_logs(std::vector<std::string> args) {
    std::string last;
    interrupted = false;
    while (!interrupted) {
      shell_reply reply;
      if (!request("logs", args, reply) || !reply.ok) {
        std::fprintf(stderr, "tutti shell: %s",
                     render::shell_text("logs", reply).c_str());
        return 1;
      }
      for (const auto& line : reply.lines)
        if (line > last) {
          std::printf("%s\n", line.c_str());
          last = line;
        }
      std::fflush(stdout);
      for (int i = 0; i < 10 && !interrupted; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 0;
  }

  caf::actor_system& sys_;
  caf::scoped_actor self_;
  coordinator_actor coordinator_;
  bool json_, yes_, interactive_;
  std::vector<std::string> paths_;
  std::chrono::steady_clock::time_point paths_at_{};
};

std::string history_path() {
  if (const char* p = std::getenv("TUTTI_SHELL_HISTORY"))
    return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.tutti_history";
}

int repl(shell_session& session) {
  shell::line_editor editor("tutti", history_path(),
                            [&](const std::string& before) {
                              return shell::complete_command_line(
                                before, session.actor_paths());
                            });
  if (!editor.history_problem().empty())
    std::fprintf(stderr, "tutti shell: history: %s\n",
                 editor.history_problem().c_str());
  std::printf("tutti shell: connected. help lists the commands; quit ends.\n");
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

int shell_main(const std::string& target, const std::string& commands,
               bool have_commands, bool json, bool yes) {
  system_options opt;
  opt.network = true;
  tutti_system_config sys_cfg{opt};
  caf::actor_system sys{sys_cfg};
  coordinator_actor coordinator;
  if (auto err = connect_any(sys, target, coordinator); !err.empty())
    return fail(1, "shell: " + err);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt; // no SA_RESTART: Ctrl-C drops the line
  sigaction(SIGINT, &sa, nullptr);
  const bool terminal = isatty(STDIN_FILENO) && !have_commands;
  shell_session session(sys, coordinator, json, yes, terminal);
  if (have_commands)
    return script(session, shell::split_commands(commands));
  if (terminal)
    return repl(session);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(std::cin, line))
    lines.push_back(line);
  return script(session, lines);
}

} // namespace

int shell_command(const std::vector<std::string>& args) {
  std::string target, commands;
  bool have_commands = false, json = false, yes = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: tutti shell --connect HOST:PORT|CONFIG "
                  "[-c \"CMD; CMD\"] [--json] [--yes]\n");
      return 0;
    }
    if ((a == "--connect" || a == "-c") && i + 1 >= args.size())
      return fail(2, "shell: " + a + " needs a value");
    if (a == "--connect")
      target = args[++i];
    else if (a == "-c") {
      commands = args[++i];
      have_commands = true;
    } else if (a == "--json")
      json = true;
    else if (a == "--yes")
      yes = true;
    else
      return fail(2, "shell: unknown argument '" + a
                       + "' (usage: tutti shell --connect HOST:PORT "
                         "[-c \"CMD; CMD\"] [--json])");
  }
  if (target.empty())
    return fail(2, "shell: missing --connect HOST:PORT (any daemon of the "
                   "job, or its config)");
  return shell_main(target, commands, have_commands, json, yes);
}

int logs_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    if (!args.empty()) {
      std::printf("usage: tutti logs CONFIG|HOST:PORT [--node N] "
                  "[--level L] [--lines N] [--follow]\n");
      return 0;
    }
    return fail(2, "logs: usage: tutti logs CONFIG|HOST:PORT [--node N] "
                   "[--level L] [--lines N] [--follow]");
  }
  std::string line = "logs";
  for (size_t i = 1; i < args.size(); ++i)
    line += " " + args[i];
  std::string error;
  shell::parse_command(line, error);
  if (!error.empty())
    return fail(2, error);
  return shell_main(args[0], line, true, false, false);
}

} // namespace tutti::cli
