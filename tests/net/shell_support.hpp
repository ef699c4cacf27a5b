#pragma once
// A live 2-daemon job for the shell and observability tests: long enough
// to be steered (it ends by the shell's stop, or is killed), with /metrics
// on, and alert rules: one that must fire (expert imbalance over 1.01) and
// one that must not (a loss spike of 1000x).

#include "daemon_support.hpp"
#include "test_support.hpp"

namespace tutti::testing {

struct live_job {
  std::filesystem::path dir, config, metrics;
  int port = 0, metrics_port = 0;
  std::unique_ptr<child_process> node0, node1;

  live_job(const std::string& name, int salt) : dir(scratch(name)) {
    auto data = dir / "data";
    REQUIRE(synth_data(data));
    port = port_block(salt);
    metrics_port = port_block(salt + 500, 2);
    config = dir / "job.yaml";
    metrics = dir / "job" / "metrics.jsonl";
    write_text(config,
               daemon_config(data.string(), (dir / "job").string(), port, 20000)
                 + "checkpoint:\n  interval_steps: 50\n"
                   "metrics:\n  port: "
                 + std::to_string(metrics_port)
                 + "\nalerts:\n  expert_imbalance: 1.01\n"
                   "  loss_spike_factor: 1000\n");
    node0 = start(0);
    node1 = start(1);
    REQUIRE(wait_until([&] { return count_lines(metrics) >= 10; }, 120));
  }

  std::unique_ptr<child_process> start(int node) {
    return start_daemon(config, node,
                        dir / ("node" + std::to_string(node) + ".log"));
  }

  // Any daemon reaches the coordinator: node 1's address.
  std::string node1_address() const {
    return "127.0.0.1:" + std::to_string(port + 2);
  }

  // Through node 1's daemon, or `via` (e.g. the config).
  command_result shell(const std::string& commands,
                       const std::string& flags = "",
                       const std::string& via = "") const {
    return run(tutti_bin() + " shell --connect "
                 + (via.empty() ? node1_address() : via) + " " + flags + " -c '"
                 + commands + "'",
               60);
  }
};

} // namespace tutti::testing
