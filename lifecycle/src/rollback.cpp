#include "tutti/lifecycle/rollback.hpp"

#include <algorithm>

#include "tutti/lifecycle/checkpoint_shape.hpp"
#include "tutti/lifecycle/checkpoint_tiers.hpp"
#include "tutti/lifecycle/config_versions.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::lifecycle {

namespace {

using fs_path = std::filesystem::path;

bool same_dir(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec1, ec2;
  return std::filesystem::weakly_canonical(a, ec1)
         == std::filesystem::weakly_canonical(b, ec2);
}

} // namespace

expected<rollback_plan> prepare_rollback(store::job_store& db,
                                         const std::filesystem::path& run_dir,
                                         int64_t version,
                                         std::optional<int64_t> step,
                                         const std::string& who) {
  auto versions = history(db);
  if (!versions)
    return versions.error();
  if (versions->empty())
    return status::error("no config versions in " + run_dir.string()
                         + " (has the job started there?)");
  auto chosen = std::find_if(
    versions->begin(), versions->end(),
    [&](const auto& v) { return v.version == version; });
  if (chosen == versions->end())
    return status::error("--to-version " + std::to_string(version)
                         + ": the job has versions 1.."
                         + std::to_string(versions->back().version));
  auto cfg = parse_job_config(chosen->config_yaml,
                              "config version " + std::to_string(version));
  if (!cfg)
    return cfg.error();
  if (!same_dir(cfg->run.dir, run_dir))
    return status::error("run.dir: version " + std::to_string(version)
                         + " writes to " + cfg->run.dir + ", not "
                         + run_dir.string());
  // A checkpoint only the archive still holds comes back first.
  if (step && !cfg->checkpoint.archive_dir.empty()) {
    auto local = db.checkpoints();
    if (!local)
      return local.error();
    const bool here = std::any_of(
      local->begin(), local->end(),
      [&](const auto& c) { return c.step == *step; });
    const auto archived = archived_steps(cfg->checkpoint.archive_dir);
    if (!here && std::count(archived.begin(), archived.end(), *step) > 0)
      TUTTI_RETURN_IF_ERROR(restore_step(db, *cfg, *step));
  }
  auto checkpoints = db.checkpoints();
  if (!checkpoints)
    return checkpoints.error();
  if (checkpoints->empty())
    return status::error("no committed checkpoint in " + run_dir.string());
  auto target = checkpoints->end() - 1;
  if (step) {
    target = std::find_if(checkpoints->begin(), checkpoints->end(),
                          [&](const auto& c) { return c.step == *step; });
    if (target == checkpoints->end()) {
      std::string have;
      for (const auto& c : *checkpoints)
        have += (have.empty() ? "" : ", ") + std::to_string(c.step);
      return status::error("--checkpoint " + std::to_string(*step)
                           + ": no committed checkpoint of that step (have "
                           + have + ")");
    }
  }
  TUTTI_RETURN_IF_ERROR(store::verify_checkpoint(target->dir));
  TUTTI_RETURN_IF_ERROR(check_checkpoint_shape(target->dir, *cfg));

  rollback_plan plan;
  plan.from_version = version;
  plan.step = target->step;
  // The later checkpoints belong to what is rolled back: kept aside.
  const auto aside = std::filesystem::path(cfg->checkpoint.root(cfg->run))
                     / "rolled_back";
  std::string set_aside;
  for (auto it = target + 1; it != checkpoints->end(); ++it) {
    std::error_code ec;
    std::filesystem::create_directories(aside, ec);
    const auto to = aside / std::filesystem::path(it->dir).filename();
    std::filesystem::remove_all(to, ec);
    std::filesystem::rename(it->dir, to, ec);
    if (ec)
      return status::error("cannot move " + it->dir + " to " + to.string()
                           + ": " + ec.message());
    TUTTI_RETURN_IF_ERROR(db.remove_checkpoint(it->step));
    set_aside += (set_aside.empty() ? "" : ", ") + std::to_string(it->step);
  }
  // The archive's copies of them too, or resuming would restore them.
  if (const fs_path archive = cfg->checkpoint.archive_dir; !archive.empty())
    for (auto archived : archived_steps(archive)) {
      if (archived <= plan.step)
        continue;
      std::error_code ec;
      std::filesystem::create_directories(archive / "rolled_back", ec);
      const auto name = store::checkpoint_dir_name(archived);
      const auto to = archive / "rolled_back" / name;
      std::filesystem::remove_all(to, ec);
      std::filesystem::rename(archive / name, to, ec);
      if (ec)
        return status::error("cannot move " + (archive / name).string() + " to "
                             + to.string() + ": " + ec.message());
    }
  auto recorded = record_start(db, *cfg, chosen->config_yaml, who,
                               "rollback to version " + std::to_string(version)
                                 + " from step " + std::to_string(plan.step));
  if (!recorded)
    return recorded.error();
  plan.new_version = *recorded;
  TUTTI_RETURN_IF_ERROR(db.put_job_state("running", plan.step));
  plan.config = run_dir
                / ("config-version-" + std::to_string(*recorded) + ".yaml");
  TUTTI_RETURN_IF_ERROR(
    store::write_file_atomic(plan.config, chosen->config_yaml));
  (void)db.append_event(
    "rollback", "to config version " + std::to_string(version) + " from step "
                  + std::to_string(plan.step) + " by " + who);
  plan.message = "rolled back to config version " + std::to_string(version)
                 + " (now version " + std::to_string(*recorded)
                 + ") from the checkpoint of step " + std::to_string(plan.step)
                 + (set_aside.empty()
                      ? std::string()
                      : "; later checkpoints set aside in " + aside.string()
                          + ": steps " + set_aside);
  return plan;
}

} // namespace tutti::lifecycle
