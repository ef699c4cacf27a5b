// tutti config history RUN_DIR | diff RUN_DIR V1 V2: a job's config
// versions (who started or changed it, when, what changed). The shell's
// `config` answers the same lines from a live job.

#include <cstdio>
#include <filesystem>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/lifecycle/config_versions.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::cli {

namespace {

// The lines of `config history|diff` for the job in RUN_DIR; exit status.
int print_versions(const std::string& what, const std::string& run_dir,
                   const std::vector<std::string>& args) {
  const auto state = std::filesystem::path(run_dir) / "state";
  if (!std::filesystem::is_directory(state))
    return fail(2, "config " + what + ": " + run_dir + " holds no job (no "
                     + state.string() + ")");
  auto db = store::job_store::open(state);
  if (!db)
    return fail(1, "config " + what + ": " + db.message());
  auto lines = lifecycle::version_lines(**db, args);
  if (!lines)
    return fail(2, "config " + what + ": " + lines.message());
  for (const auto& line : *lines)
    std::printf("%s\n", line.c_str());
  return 0;
}

int history(const std::vector<std::string>& args) {
  command_line cl("config history", "RUN_DIR",
                  "every config version of the job: when, who, why, and the "
                  "keys that changed");
  cl.required("run_dir", "RUN_DIR");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  return print_versions("history", vm["run_dir"].as<std::string>(),
                        {"history"});
}

int diff(const std::vector<std::string>& args) {
  command_line cl("config diff", "RUN_DIR V1 V2",
                  "the keys whose values differ between two config versions");
  cl.positional("run_dir").positional("versions", 2);
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("run_dir") || !vm.count("versions")
      || vm["versions"].as<std::vector<std::string>>().size() != 2)
    return cl.bad("usage: tutti config diff RUN_DIR V1 V2");
  const auto versions = vm["versions"].as<std::vector<std::string>>();
  for (const auto& v : versions)
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
      return cl.bad("version '" + v + "' is not a number");
  return print_versions("diff", vm["run_dir"].as<std::string>(),
                        {"diff", versions[0], versions[1]});
}

} // namespace

int config_command(const std::vector<std::string>& args) {
  const std::string usage =
    "usage: tutti config history RUN_DIR | diff RUN_DIR V1 V2";
  if (args.empty())
    return fail(2, "config: " + usage);
  if (args[0] == "--help" || args[0] == "-h") {
    std::printf("%s\n'tutti config SUBCOMMAND --help' describes each.\n",
                usage.c_str());
    return 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "history")
    return history(rest);
  if (args[0] == "diff")
    return diff(rest);
  return fail(2,
              "config: unknown subcommand '" + args[0] + "' (" + usage + ")");
}

} // namespace tutti::cli
