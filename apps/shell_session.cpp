#include "shell_session.hpp"

#include "tutti/render/shell.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "commands.hpp"
#include "gateway_admin.hpp"
#include "shell_command.hpp"

namespace tutti::cli {

namespace {

std::atomic<bool> interrupted{false};
void on_interrupt(int) { interrupted = true; }

} // namespace

void shell_session::catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt; // no SA_RESTART: Ctrl-C drops the line
  sigaction(SIGINT, &sa, nullptr);
}

shell_session::shell_session(client::job_client* job, bool json, bool yes,
                             bool interactive)
  : job_(job), json_(json), yes_(yes), interactive_(interactive) {}

int shell_session::run(const std::string& line, bool& quit) {
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
    return help(cmd.args);
  if (cmd.name == "rollout")
    return rollout(cmd.args, cmd.options);
  if (cmd.name == "rollback")
    return rollback(cmd.args, cmd.options);
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

std::vector<std::string> shell_session::actor_paths() {
  const auto now = std::chrono::steady_clock::now();
  if (now - paths_at_ < std::chrono::seconds(2))
    return paths_;
  paths_at_ = now;
  if (!job_)
    return paths_;
  auto reply = job_->shell("actors", {});
  if (reply && reply->ok) {
    paths_.clear();
    for (const auto& a : reply->actors)
      paths_.push_back(a.path);
  }
  return paths_;
}

int shell_session::ask(const std::string& name,
                       const std::vector<std::string>& args) {
  if (!job_) {
    std::fprintf(stderr,
                 "tutti shell: %s: not connected to a job (start the shell "
                 "with --connect HOST:PORT|CONFIG)\n",
                 name.c_str());
    return 1;
  }
  auto reply = job_->shell(name, args);
  if (!reply) {
    std::fprintf(stderr, "tutti shell: %s\n", reply.message().c_str());
    return 1;
  }
  if (!reply->ok) {
    std::fprintf(stderr, "tutti shell: %s",
                 render::shell_text(name, *reply).c_str());
    return 1;
  }
  std::fputs(json_ ? (render::shell_json(name, *reply) + "\n").c_str()
                   : render::shell_text(name, *reply).c_str(),
             stdout);
  std::fflush(stdout);
  return 0;
}

int shell_session::help(const std::vector<std::string>& args) {
  for (const auto& c : shell::shell_commands())
    if (args.empty() || c.name == args[0])
      std::printf("  %-44s %s\n", c.usage.c_str(), c.help.c_str());
  return 0;
}

bool shell_session::confirm(const std::string& what) {
  if (yes_)
    return true;
  if (!interactive_) {
    std::fprintf(stderr, "tutti shell: %s asks for confirmation: add --yes\n",
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

// With RUN_DIR: what `tutti rollback RUN_DIR ...` does (the job must be
// stopped; its store is locked while it runs), the job run in the
// foreground. Without: the connected job's coordinator answers (it checks
// the operator role and audits; a running job is refused, naming what to
// do instead).
int shell_session::rollback(const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& options) {
  auto option = [&](const std::string& name) {
    auto i = options.find(name);
    return i == options.end() ? std::string() : i->second;
  };
  if (args.empty()) {
    if (!job_) {
      std::fprintf(stderr, "tutti shell: rollback: name the job's RUN_DIR, or "
                           "connect to the job (--connect)\n");
      return 2;
    }
    return ask("rollback", {option("to-version"), option("checkpoint")});
  }
  std::vector<std::string> argv = {args[0], "--to-version",
                                   option("to-version")};
  if (options.count("checkpoint"))
    argv.insert(argv.end(), {"--checkpoint", option("checkpoint")});
  for (const char* flag : {"prepare-only", "quiet"})
    if (options.count(flag))
      argv.push_back(std::string("--") + flag);
  return rollback_command(argv);
}

int shell_session::rollout(const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& options) {
  auto token_file = options.find("token-file");
  auto answer = gateway_admin_request(
    args[0], args[1], token_file == options.end() ? "" : token_file->second);
  const bool json_answer = answer.text.rfind('{', 0) == 0
                           || answer.text.rfind('[', 0) == 0;
  if (answer.exit_status != 0 && !json_answer) {
    std::fprintf(stderr, "tutti shell: rollout: %s\n", answer.text.c_str());
    return answer.exit_status;
  }
  std::fprintf(answer.exit_status == 0 ? stdout : stderr, "%s\n",
               answer.text.c_str());
  std::fflush(stdout);
  return answer.exit_status == 0 ? 0 : 1;
}

// Prints new lines every second until interrupted (Ctrl-C).
int shell_session::follow_logs(const std::vector<std::string>& args) {
  std::string last;
  interrupted = false;
  if (!job_)
    return ask("logs", args); // says it is not connected
  while (!interrupted) {
    auto reply = job_->shell("logs", args);
    if (!reply || !reply->ok) {
      std::fprintf(stderr, "tutti shell: %s",
                   reply ? render::shell_text("logs", *reply).c_str()
                         : (reply.message() + "\n").c_str());
      return 1;
    }
    for (const auto& line : reply->lines)
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

} // namespace tutti::cli
