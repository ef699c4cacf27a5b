// tutti diag CONFIG: the interconnect check across the running daemons of
// a config. Exit 0 healthy, 3 when stragglers are named, 1 when the check
// could not run, 2 on bad input.

#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/client/job_client.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/kernels/packed_gemm.hpp"
#include "tutti/kernels/stream.hpp"

namespace tutti::cli {

namespace {

// What this machine's CPU runs each precision on, and why: the kernels are
// chosen at run time, so two machines of one job may differ.
void print_cpu_kernels() {
  const auto bf16 = kernels::cpu_bf16_support();
  std::printf(
    "this machine's CPU: %s\n"
    "  train.gemm_precision bf16: %s%s%s\n"
    "  serve.weight_dtype fp32 and int8: %s\n"
    "  serve.weight_dtype bf16: %s\n"
    "  serve.activation_dtype int8: %s\n",
    kernels::cpu_capabilities().c_str(),
    bf16.runs_bf16 ? "oneDNN " : "float32 (no bf16 units; oneDNN: ", bf16.isa,
    bf16.runs_bf16 ? "" : ")", kernels::int8_gemm_kernel().c_str(),
    kernels::bf16_gemm_kernel().c_str(),
    kernels::int8_dot_gemm_kernel().c_str());
}

} // namespace

int diag_command(const std::vector<std::string>& args) {
  command_line cl("diag", "CONFIG",
                  "exit 0 healthy, 3 when stragglers are named, 1 when the "
                  "check could not run");
  cl.positional("config");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("config"))
    return cl.bad("usage: tutti diag CONFIG");
  auto loaded = load_job_config(vm["config"].as<std::string>());
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  const job_config& cfg = *loaded;
  print_cpu_kernels();
  client::job_client job;
  if (auto s = job.connect(client::endpoint{
        cfg.cluster.coordinator_host(),
        static_cast<uint16_t>(cfg.cluster.coordinator_port())});
      !s)
    return fail(1, "diag: " + s.message());
  // Each pair and size takes a few collectives; bound the wait by the
  // collective timeout with room for all of them.
  const auto timeout = std::chrono::milliseconds(
                         cfg.cluster.collective_timeout_ms)
                       + std::chrono::seconds(30 * cfg.cluster.nnodes);
  auto report = job.diag(
    std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  if (!report)
    return fail(1, "diag: " + report.message());
  std::fputs(report->text.c_str(), stdout);
  return !report->ok ? 1 : report->stragglers.empty() ? 0 : 3;
}

} // namespace tutti::cli
