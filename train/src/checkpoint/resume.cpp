#include "tutti/train/resume.hpp"

#include <filesystem>

#include "tutti/runtime/log.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti {

namespace {

// When the previous run stopped without its checkpoint (tuttid: the grace
// time ran out), which steps are trained again; "" otherwise.
std::string behind_the_stop(
  const expected<std::optional<std::pair<std::string, int64_t>>>& state,
  int64_t resume_step) {
  if (!state.ok() || !state.value()
      || state.value()->first != "stopped_without_checkpoint"
      || state.value()->second <= resume_step)
    return "";
  const auto stopped_at = state.value()->second;
  return ", the last committed checkpoint: the previous run stopped at step "
         + std::to_string(stopped_at)
         + " without its checkpoint (its grace time ran out), so steps "
         + std::to_string(resume_step + 1) + ".." + std::to_string(stopped_at)
         + " are trained again";
}

} // namespace

resume_point find_resume_point(store::job_store& db, const job_config& cfg,
                               const std::string& config_yaml) {
  resume_point out;
  const auto fingerprint = fingerprint_text(cfg);
  auto spec = db.job_spec();
  if (!spec.ok())
    return {resume_point::refused, 0, spec.message()};
  if (!spec.value()) {
    if (auto err = db.put_job_spec(fingerprint, config_yaml); !err)
      return {resume_point::refused, 0, err.message()};
    if (auto err = db.put_job_state("running", 0); !err)
      return {resume_point::refused, 0, err.message()};
    db.append_event("job_started", "fresh start");
    return out;
  }
  if (spec.value()->first != fingerprint)
    return {resume_point::refused, 0,
            cfg.run.dir + " holds a different job ("
              + first_difference(fingerprint, spec.value()->first)
              + "); start over with --fresh"};
  auto state = db.job_state();
  // A job whose config now asks for more steps goes on.
  if (state.ok() && state.value() && state.value()->first == "completed"
      && state.value()->second >= cfg.train.steps)
    return {resume_point::completed, state.value()->second,
            "the job in " + cfg.run.dir + " completed at step "
              + std::to_string(state.value()->second)
              + "; start over with --fresh"};
  auto all = db.checkpoints();
  if (!all.ok())
    return {resume_point::refused, 0, all.message()};
  std::string skipped;
  for (auto i = all.value().rbegin(); i != all.value().rend(); ++i) {
    if (auto err = store::verify_checkpoint(i->dir); !err) {
      auto why = "checkpoint step " + std::to_string(i->step)
                 + " is corrupt, skipped: " + err.message();
      log_warn("resume", why);
      db.append_event("checkpoint_skipped_corrupt", why);
      skipped += why + "\n";
      continue;
    }
    if (i->step >= cfg.train.steps) {
      if (auto put = db.put_job_state("completed", i->step); !put)
        log_warn("resume", put.message());
      return {resume_point::completed, i->step,
              skipped + "the job in " + cfg.run.dir + " completed at step "
                + std::to_string(i->step) + "; start over with --fresh"};
    }
    db.append_event("resume",
                    "from the checkpoint of step " + std::to_string(i->step));
    if (auto put = db.put_job_state("running", i->step); !put)
      log_warn("resume", put.message());
    return {resume_point::resume, i->step,
            skipped + "resuming after step " + std::to_string(i->step)
              + behind_the_stop(state, i->step)};
  }
  db.append_event("resume", "no usable checkpoint: from scratch");
  return {resume_point::fresh, 0,
          skipped + "no usable checkpoint; starting from scratch"};
}

status forget_job(store::job_store& db, const job_config& cfg) {
  TUTTI_RETURN_IF_ERROR(db.reset());
  std::error_code ec;
  std::filesystem::remove_all(cfg.checkpoint.root(cfg.run), ec);
  std::filesystem::remove(std::filesystem::path(cfg.run.dir) / "metrics.jsonl",
                          ec);
  return {};
}

} // namespace tutti
