#include "job_start.hpp"

#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "tutti/runtime/log.hpp"
#include "tutti/train/resume.hpp"
#include "tutti/lifecycle/checkpoint_tiers.hpp"
#include "tutti/lifecycle/config_versions.hpp"
#include "tutti/placement/job_placement.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::cli {

namespace {

job_start refuse(const char* program, int status, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program, why.c_str());
  job_start out;
  out.status = status;
  return out;
}

// --fresh deletes checkpoints: confirm unless told --yes.
bool confirmed(const job_config& cfg) {
  if (!isatty(STDIN_FILENO))
    return false;
  std::printf("--fresh deletes the job state and checkpoints under %s. "
              "Type yes to go on: ",
              cfg.run.dir.c_str());
  std::fflush(stdout);
  std::string answer;
  std::getline(std::cin, answer);
  return answer == "yes";
}

} // namespace

job_start open_job(const job_config& cfg, const std::string& config_path,
                   const std::string& state_dir, bool fresh, bool yes,
                   const char* program) {
  // A plan that does not read or does not fit the job is refused here,
  // before anything starts (the ranks read it again at each epoch).
  if (auto plan = placement::plan_for(cfg); !plan.ok())
    return refuse(program, 2, plan.message());
  auto opened = store::job_store::open(state_dir);
  if (!opened.ok())
    return refuse(program, 1, opened.message());
  job_start out;
  out.db = std::shared_ptr<store::job_store>(std::move(opened.value()));
  if (fresh) {
    if (!yes && !confirmed(cfg))
      return refuse(program, 2,
                    "--fresh not confirmed (answer yes on a terminal, or add "
                    "--yes)");
    if (auto forgot = forget_job(*out.db, cfg); !forgot)
      return refuse(program, 1, forgot.message());
  }
  auto yaml = store::read_file(config_path);
  const auto text = yaml.ok() ? yaml.value() : "";
  // A restart with a changed config is a new config version (a changed
  // model shape is refused); a first start is version 1 once it is known
  // to be one.
  auto spec = out.db->job_spec();
  if (!spec.ok())
    return refuse(program, 1, spec.message());
  const bool first_start = !spec.value().has_value();
  if (!first_start) {
    auto version = lifecycle::record_start(*out.db, cfg, text,
                                           lifecycle::who_am_i(program));
    if (!version)
      return refuse(program, 2, version.message());
  }
  // The archive tier may hold a newer checkpoint than the local one (or
  // the only one left): bring it back first.
  if (auto restored = lifecycle::restore_from_archive(*out.db, cfg); !restored)
    log_warn("job_start", "checkpoint.archive_dir: " + restored.message());
  else if (*restored)
    std::printf("checkpoint of step %lld restored from %s\n",
                static_cast<long long>(**restored),
                cfg.checkpoint.archive_dir.c_str());
  auto point = find_resume_point(*out.db, cfg, text);
  if (first_start && point.what != resume_point::refused)
    if (auto version = lifecycle::record_start(*out.db, cfg, text,
                                               lifecycle::who_am_i(program));
        !version)
      return refuse(program, 1, version.message());
  switch (point.what) {
  case resume_point::refused:
    return refuse(program, 2, point.message);
  case resume_point::completed:
    std::printf("%s\n", point.message.c_str());
    out.completed = true;
    out.resume_step = point.step;
    return out;
  case resume_point::resume:
    std::printf("%s\n", point.message.c_str());
    log_info("job_start", point.message);
    out.resume_step = point.step;
    return out;
  case resume_point::fresh:
    // Empty on a first start; otherwise what was skipped and why.
    if (!point.message.empty())
      std::printf("%s\n", point.message.c_str());
    return out;
  }
  return out;
}

} // namespace tutti::cli
