#pragma once
// Checkpoint lifecycle beyond keep_last: milestones (every Nth checkpoint
// kept), expiry by age, a second, slower tier (checkpoint.archive_dir) that
// committed checkpoints are copied to in the background and verified in,
// and the free-space arithmetic of a save.
//
// The archive holds the same step-XXXXXXXX directories as the local tier;
// a copy is made under step-XXXXXXXX.partial, fsynced, verified (every hash,
// and its MANIFEST equal to the original's) and only then renamed, so a
// directory without the suffix is complete.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::lifecycle {

struct retention_policy {
  int64_t keep_last = 3;
  int64_t milestone_every = 0; // 0: no milestones
  double expire_after_h = 0;   // 0: no expiry by age
};
retention_policy retention_of(const checkpoint_config& c);

// A checkpoint kept whatever keep_last says: its step is a multiple of
// milestone_every.
bool is_milestone(int64_t step, const retention_policy& p);

// The steps to remove from a tier holding `steps` (ascending, with their
// commit times): beyond the newest keep_last (`keep_last` < 0: no count
// limit), and those older than expire_after_h; never a milestone, never the
// newest.
std::vector<int64_t> steps_to_remove(
  const std::vector<std::pair<int64_t, int64_t>>& steps_and_times_ms,
  const retention_policy& p, int64_t keep_last, int64_t now_unix_ms);

// Complete checkpoints in an archive directory, ascending step.
std::vector<int64_t> archived_steps(const std::filesystem::path& archive);

// Copies the checkpoint directory `source` into `target_root` (as its
// step-XXXXXXXX name) by way of a .partial directory, fsynced and verified.
// Replaces an earlier copy of the same step.
status copy_checkpoint(const std::filesystem::path& source,
                       const std::filesystem::path& target_root);

// Before a job (re)starts: if the archive holds a newer checkpoint than any
// local one that verifies (the local ones deleted, say), copies it back to
// the local tier and records it committed. Returns the step restored.
expected<std::optional<int64_t>> restore_from_archive(store::job_store& db,
                                                      const job_config& cfg);

// Brings the archived checkpoint of `step` back to the local tier and
// records it (for rollback to a checkpoint only the archive still holds).
status restore_step(store::job_store& db, const job_config& cfg, int64_t step);

// Bytes free to an unprivileged writer on the file system holding `dir`
// (or its nearest existing parent).
expected<uint64_t> free_bytes(const std::filesystem::path& dir);

// The archive copier: one thread of its own (copies block on disks), fed
// by the journal after each commit. Each copy, verification failure and
// expiry is reported through `report(kind, detail, seconds)`.
class archiver {
public:
  using report_fn = std::function<void(
    const std::string& kind, const std::string& detail, double seconds)>;
  archiver(std::filesystem::path archive, retention_policy policy,
           report_fn report);
  // Finishes the copies already queued, then stops.
  ~archiver();
  archiver(const archiver&) = delete;
  archiver& operator=(const archiver&) = delete;

  void enqueue(int64_t step, const std::filesystem::path& dir);
  // Queued or being copied: the local tier keeps it until it is archived.
  bool pending(int64_t step) const;

private:
  void run();
  void expire();

  std::filesystem::path archive_;
  retention_policy policy_;
  report_fn report_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<int64_t, std::filesystem::path>> queue_;
  std::set<int64_t> pending_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace tutti::lifecycle
