// tutti audit [list] RUN_DIR | tutti audit verify RUN_DIR: the run's audit
// log (RUN_DIR/audit.jsonl): every operator action and refusal, each
// record chained to the one before by its hash.

#include <cstdio>
#include <filesystem>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/security/audit_log.hpp"

namespace tutti::cli {

namespace {

std::string log_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "audit.jsonl").string();
}

} // namespace

int audit_command(const std::vector<std::string>& args) {
  const bool verify = !args.empty() && args[0] == "verify";
  const bool list = !args.empty() && args[0] == "list";
  command_line cl(verify ? "audit verify" : "audit",
                  verify ? "RUN_DIR" : "[list] RUN_DIR",
                  verify ? "checks the hash chain of RUN_DIR/audit.jsonl; "
                           "names the first\nrecord edited, removed or "
                           "reordered (exit 1)"
                         : "every operator action and refusal of the run");
  cl.positional("run_dir");
  po::variables_map vm;
  if (auto done = cl.parse(
        {args.begin() + ((verify || list) ? 1 : 0), args.end()}, vm))
    return *done;
  if (!vm.count("run_dir"))
    return cl.bad("usage: " + cl.usage_line());
  const auto path = log_path(vm["run_dir"].as<std::string>());
  if (!std::filesystem::exists(path))
    return fail(2, "audit: " + path + ": no such file");
  if (verify) {
    if (auto ok = security::verify_audit_log(path); !ok.ok())
      return fail(1, "audit verify: " + ok.message());
    auto records = security::read_audit_log(path);
    std::printf("%s: %zu records, chain intact\n", path.c_str(),
                records ? records->size() : size_t{0});
    return 0;
  }
  auto records = security::read_audit_log(path);
  if (!records)
    return fail(1, "audit: " + records.message());
  for (const auto& r : *records)
    std::printf("%lld %s %s (%s) from %s: %s%s%s -> %s: %s\n",
                static_cast<long long>(r.seq), r.time.c_str(), r.user.c_str(),
                r.role.empty() ? "-" : r.role.c_str(), r.source.c_str(),
                r.command.c_str(), r.target.empty() ? "" : " ",
                r.target.c_str(), r.decision.c_str(), r.result.c_str());
  return 0;
}

} // namespace tutti::cli
