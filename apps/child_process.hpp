#pragma once
// A program started in the background (fork + exec) with stdout and stderr
// in a log file. It is killed with SIGKILL and reaped when its handle goes
// out of scope, and it dies with its parent (PR_SET_PDEATHSIG), so neither
// `tutti drill` nor a test leaves a daemon behind.

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tutti {

// A program in the background with stdout and stderr in `log`.
class child_process {
public:
  child_process(const std::vector<std::string>& argv,
                const std::filesystem::path& log) {
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // Die with the test, even when it is killed without unwinding.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(127);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int null = open("/dev/null", O_RDONLY);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      if (null >= 0)
        dup2(null, 0);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() { kill_and_reap(); }

  pid_t pid() const { return pid_; }

  // Exit status (128 + signal when signalled), or -1 if it is still running
  // after `seconds`.
  int wait(double seconds) {
    if (status_)
      return *status_;
    auto deadline = std::chrono::steady_clock::now()
                    + std::chrono::duration<double>(seconds);
    while (true) {
      if (poll_exit())
        return *status_;
      if (std::chrono::steady_clock::now() >= deadline)
        return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  bool running() { return pid_ > 0 && !poll_exit(); }

  void signal(int sig) {
    if (pid_ > 0 && !status_)
      ::kill(pid_, sig);
  }

  void kill_and_reap() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int raw = 0;
      waitpid(pid_, &raw, 0);
      status_ = decode(raw);
    }
  }

private:
  static int decode(int raw) {
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  }
  bool poll_exit() {
    if (status_)
      return true;
    int raw = 0;
    if (pid_ > 0 && waitpid(pid_, &raw, WNOHANG) == pid_) {
      status_ = decode(raw);
      return true;
    }
    return false;
  }

  pid_t pid_ = -1;
  std::optional<int> status_;
};

} // namespace tutti
