#pragma once
// The subcommands of the `tutti` command line. Each returns the process
// exit status: 0 success, 1 failure at run time, 2 bad input.

#include <string>
#include <vector>

namespace tutti::cli {

int run_command(const std::vector<std::string>& args);
int data_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int diag_command(const std::vector<std::string>& args);
int ckpt_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);
int chaos_command(const std::vector<std::string>& args);
int status_command(const std::vector<std::string>& args);
int drill_command(const std::vector<std::string>& args);
int shell_command(const std::vector<std::string>& args);
int logs_command(const std::vector<std::string>& args);
int sample_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int certs_command(const std::vector<std::string>& args);
int audit_command(const std::vector<std::string>& args);
int token_command(const std::vector<std::string>& args);
int config_command(const std::vector<std::string>& args);
int rollback_command(const std::vector<std::string>& args);
int experts_command(const std::vector<std::string>& args);
int report_command(const std::vector<std::string>& args);
int placement_command(const std::vector<std::string>& args);
int publish_command(const std::vector<std::string>& args);
int gateway_command(const std::vector<std::string>& args);
int rollout_command(const std::vector<std::string>& args);

// Prints "tutti: <what>" to stderr and returns `status`.
int fail(int status, const std::string& what);

} // namespace tutti::cli
