#pragma once
// The shell's side of `tutti shell` and `tutti logs`: runs one command line
// against a live job through its job_client and prints the answer (text,
// or JSON with --json). `rollout` talks to a gateway and `rollback RUN_DIR`
// works on a stopped job's directory, so those need no job connection.

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tutti/client/job_client.hpp"

namespace tutti::cli {

class shell_session {
public:
  // `interactive`: may ask on the terminal before a kill. `job` null: not
  // connected; the job's commands say so.
  shell_session(client::job_client* job, bool json, bool yes, bool interactive);

  // 0 ok, 1 refused or failed, 2 malformed; `quit` set by quit/exit.
  int run(const std::string& line, bool& quit);

  // The live actor paths, for Tab completion (asked at most every 2 s).
  std::vector<std::string> actor_paths();

  // Ctrl-C ends `logs --follow` (and drops the line being typed) instead
  // of the process.
  static void catch_interrupts();

private:
  int ask(const std::string& name, const std::vector<std::string>& args);
  int help(const std::vector<std::string>& args);
  bool confirm(const std::string& what);
  int follow_logs(const std::vector<std::string>& args);
  int rollback(const std::vector<std::string>& args,
               const std::map<std::string, std::string>& options);
  int rollout(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& options);

  client::job_client* job_;
  bool json_, yes_, interactive_;
  std::vector<std::string> paths_;
  std::chrono::steady_clock::time_point paths_at_{};
};

} // namespace tutti::cli
