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

shell_session::shell_session(client::job_client& job, bool json, bool yes,
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
  auto reply = job_.shell("actors", {});
  if (reply && reply->ok) {
    paths_.clear();
    for (const auto& a : reply->actors)
      paths_.push_back(a.path);
  }
  return paths_;
}

int shell_session::ask(const std::string& name,
                       const std::vector<std::string>& args) {
  auto reply = job_.shell(name, args);
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

// Prints new lines every second until interrupted (Ctrl-C).
int shell_session::follow_logs(const std::vector<std::string>& args) {
  std::string last;
  interrupted = false;
  while (!interrupted) {
    auto reply = job_.shell("logs", args);
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
