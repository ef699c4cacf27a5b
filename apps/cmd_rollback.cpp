// tutti rollback RUN_DIR --to-version V [--checkpoint STEP]: restart the
// job on config version V from the checkpoint of STEP (default: the newest
// committed), in this process as `tutti run` would.

#include <cstdio>
#include <filesystem>

#include "command_line.hpp"
#include "commands.hpp"
#include "job_start.hpp"
#include "tutti/lifecycle/config_versions.hpp"
#include "tutti/lifecycle/rollback.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::cli {

int rollback_command(const std::vector<std::string>& args) {
  command_line cl("rollback", "RUN_DIR --to-version V [--checkpoint STEP]",
                  "restarts the job on config version V (tutti config "
                  "history) from a committed\ncheckpoint; later checkpoints "
                  "are set aside, the restart is a new version;\na checkpoint "
                  "whose model shape differs from V's is refused");
  int64_t version = 0, step = -1;
  cl.options()("to-version", po::value(&version), "the config version")(
    "checkpoint", po::value(&step), "its step (default: the newest)")(
    "quiet", "no progress lines")("prepare-only",
                                  "set the job up, do not run it (tutti run "
                                  "RUN_DIR/config-version-N.yaml does)");
  cl.required("run_dir", "RUN_DIR");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("to-version") || version < 1)
    return cl.bad("--to-version V (>= 1) is required");
  if (vm.count("checkpoint") && step < 0)
    return cl.bad("--checkpoint STEP must be >= 0");
  const std::filesystem::path run_dir = vm["run_dir"].as<std::string>();
  if (!std::filesystem::is_directory(run_dir / "state"))
    return fail(2, "rollback: " + run_dir.string() + " holds no job (no "
                     + (run_dir / "state").string() + ")");
  lifecycle::rollback_plan plan;
  {
    // Closed before the job reopens it.
    auto db = store::job_store::open(run_dir / "state");
    if (!db)
      return fail(1, "rollback: " + db.message());
    auto prepared = lifecycle::prepare_rollback(
      **db, run_dir, version,
      vm.count("checkpoint") ? std::optional<int64_t>(step) : std::nullopt,
      lifecycle::who_am_i("tutti rollback"));
    if (!prepared)
      return fail(2, "rollback: " + prepared.message());
    plan = *prepared;
  }
  std::printf("%s\n", plan.message.c_str());
  if (vm.count("prepare-only")) {
    std::printf("run it with: tutti run %s\n", plan.config.c_str());
    return 0;
  }
  return run_job_file(plan.config.string(), vm.count("quiet") > 0, false,
                      false);
}

} // namespace tutti::cli
