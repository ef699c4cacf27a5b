#pragma once
// `tutti gateway` as a child process, for the tests of the gateway program
// (its canary, its admin endpoints).

#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon_support.hpp"

namespace tutti::testing {

// `tutti gateway CONFIG --listen HOST:PORT ARGS...`, once start() is
// called; SIGTERM at the end of its scope (the gateway stops its
// replicas).
struct gateway_process {
  std::filesystem::path config, log;
  int port;
  std::string host;
  std::vector<std::string> args;
  std::unique_ptr<child_process> process;

  gateway_process(std::filesystem::path config_, std::filesystem::path log_,
                  int port_, std::string host_ = "127.0.0.1",
                  std::vector<std::string> args_ = {})
    : config(std::move(config_)), log(std::move(log_)), port(port_),
      host(std::move(host_)), args(std::move(args_)) {}
  void start() {
    std::vector<std::string> argv{tutti_bin(), "gateway", config.string(),
                                  "--listen",
                                  host + ":" + std::to_string(port)};
    argv.insert(argv.end(), args.begin(), args.end());
    process = std::make_unique<child_process>(argv, log);
  }
  ~gateway_process() {
    if (process) {
      process->signal(SIGTERM);
      process->wait(20);
    }
  }
};

} // namespace tutti::testing
