#include "tutti/lifecycle/checkpoint_tiers.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti::lifecycle {

namespace fs = std::filesystem;

namespace {

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

// "step-00000012" -> 12; -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string prefix = "step-";
  if (name.size() != prefix.size() + 8 || name.rfind(prefix, 0) != 0)
    return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

status fsync_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0)
    return status::error("cannot open " + file.string() + ": "
                         + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    return status::error("fsync " + file.string() + ": " + std::strerror(err));
  return {};
}

// The MANIFEST's modification time, as the archive's commit time.
int64_t archived_time_ms(const fs::path& dir) {
  std::error_code ec;
  auto t = fs::last_write_time(dir / "MANIFEST", ec);
  if (ec)
    return now_ms();
  const auto sys = std::chrono::file_clock::to_sys(t);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           sys.time_since_epoch())
    .count();
}

} // namespace

retention_policy retention_of(const checkpoint_config& c) {
  return {c.keep_last, c.milestone_every, c.expire_after_h};
}

bool is_milestone(int64_t step, const retention_policy& p) {
  return p.milestone_every > 0 && step > 0 && step % p.milestone_every == 0;
}

std::vector<int64_t> steps_to_remove(
  const std::vector<std::pair<int64_t, int64_t>>& steps_and_times_ms,
  const retention_policy& p, int64_t keep_last, int64_t now_unix_ms) {
  std::vector<int64_t> out;
  const auto n = static_cast<int64_t>(steps_and_times_ms.size());
  const auto max_age_ms = static_cast<int64_t>(p.expire_after_h * 3600e3);
  // Counted among the non-milestones: milestones come on top of keep_last.
  int64_t newer_kept = 0;
  for (int64_t i = n - 1; i >= 0; --i) {
    const auto [step, time_ms] = steps_and_times_ms[i];
    if (i == n - 1 || is_milestone(step, p)) {
      newer_kept += i == n - 1 ? 1 : 0;
      continue;
    }
    const bool too_many = keep_last >= 0 && newer_kept >= keep_last;
    const bool too_old = max_age_ms > 0 && now_unix_ms - time_ms > max_age_ms;
    if (too_many || too_old)
      out.push_back(step);
    else
      ++newer_kept;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<int64_t> archived_steps(const fs::path& archive) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(archive, ec)) {
    const auto step = step_of(entry.path().filename().string());
    if (step >= 0 && fs::exists(entry.path() / "MANIFEST"))
      out.push_back(step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

status copy_checkpoint(const fs::path& source, const fs::path& target_root) {
  const auto name = source.filename();
  const auto final_dir = target_root / name;
  const auto partial = target_root / (name.string() + ".partial");
  std::error_code ec;
  fs::remove_all(partial, ec);
  TUTTI_RETURN_IF_ERROR(store::create_directories_durable(partial));
  for (const auto& entry : fs::directory_iterator(source, ec)) {
    if (!entry.is_regular_file())
      continue;
    const auto to = partial / entry.path().filename();
    fs::copy_file(entry.path(), to, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return status::error("cannot copy " + entry.path().string() + " to "
                           + to.string() + ": " + ec.message());
    TUTTI_RETURN_IF_ERROR(fsync_file(to));
  }
  if (ec)
    return status::error("cannot list " + source.string() + ": "
                         + ec.message());
  TUTTI_RETURN_IF_ERROR(store::fsync_directory(partial));
  // The copy must be the checkpoint: every hash, and the same MANIFEST.
  TUTTI_RETURN_IF_ERROR(store::verify_checkpoint(partial));
  auto original = store::read_file(source / "MANIFEST");
  auto copied = store::read_file(partial / "MANIFEST");
  if (!original || !copied || *original != *copied)
    return status::error("the copy of " + source.string() + " in "
                         + partial.string() + " does not match its MANIFEST");
  fs::remove_all(final_dir, ec);
  fs::rename(partial, final_dir, ec);
  if (ec)
    return status::error("cannot rename " + partial.string() + " to "
                         + final_dir.string() + ": " + ec.message());
  return store::fsync_directory(target_root);
}

status restore_step(store::job_store& db, const job_config& cfg, int64_t step) {
  const fs::path archive = cfg.checkpoint.archive_dir;
  const auto from = archive / store::checkpoint_dir_name(step);
  TUTTI_RETURN_IF_ERROR(store::verify_checkpoint(from));
  const fs::path local = cfg.checkpoint.root(cfg.run);
  TUTTI_RETURN_IF_ERROR(copy_checkpoint(from, local));
  auto manifest = store::read_manifest(local
                                       / store::checkpoint_dir_name(step));
  if (!manifest)
    return manifest.error();
  int64_t bytes = 0;
  for (const auto& shard : manifest->shards)
    bytes += static_cast<int64_t>(shard.bytes);
  TUTTI_RETURN_IF_ERROR(db.commit_checkpoint(
    {step, (local / store::checkpoint_dir_name(step)).string(), bytes, 0,
     manifest->epoch}));
  (void)db.append_event("checkpoint_restored", "step " + std::to_string(step)
                                                 + " copied back from "
                                                 + from.string());
  return {};
}

expected<std::optional<int64_t>> restore_from_archive(store::job_store& db,
                                                      const job_config& cfg) {
  if (cfg.checkpoint.archive_dir.empty())
    return std::optional<int64_t>();
  auto archived = archived_steps(cfg.checkpoint.archive_dir);
  auto local = db.checkpoints();
  if (!local)
    return local.error();
  int64_t newest_local = -1;
  for (auto it = local->rbegin(); it != local->rend(); ++it)
    if (store::verify_checkpoint(it->dir).ok()) {
      newest_local = it->step;
      break;
    }
  // Newest first: a copy that no longer verifies is passed over.
  for (auto it = archived.rbegin(); it != archived.rend(); ++it) {
    if (*it <= newest_local)
      break;
    if (auto restored = restore_step(db, cfg, *it); !restored) {
      (void)db.append_event("checkpoint_skipped_corrupt",
                            "archived step " + std::to_string(*it) + ": "
                              + restored.message());
      continue;
    }
    return std::optional<int64_t>(*it);
  }
  return std::optional<int64_t>();
}

expected<uint64_t> free_bytes(const fs::path& dir) {
  fs::path at = dir;
  std::error_code ec;
  while (!at.empty() && !fs::exists(at, ec))
    at = at.parent_path();
  if (at.empty())
    at = ".";
  struct statvfs s {};
  if (::statvfs(at.c_str(), &s) != 0)
    return status::error("statvfs " + at.string() + ": "
                         + std::strerror(errno));
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

archiver::archiver(fs::path archive, retention_policy policy, report_fn report)
  : archive_(std::move(archive)), policy_(policy), report_(std::move(report)),
    thread_([this] { run(); }) {}

archiver::~archiver() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void archiver::enqueue(int64_t step, const fs::path& dir) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(step, dir);
    pending_.insert(step);
  }
  wake_.notify_all();
}

bool archiver::pending(int64_t step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.count(step) > 0;
}

void archiver::run() {
  for (;;) {
    std::pair<int64_t, fs::path> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping, nothing left to copy
      job = queue_.front();
      queue_.pop_front();
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto copied = copy_checkpoint(job.second, archive_);
    const double took = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    if (copied)
      report_("checkpoint_archived",
              "step " + std::to_string(job.first) + " copied to "
                + (archive_ / job.second.filename()).string() + " and verified",
              took);
    else
      report_("checkpoint_archive_failed",
              "step " + std::to_string(job.first) + ": " + copied.message(),
              took);
    expire();
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.erase(job.first);
  }
}

void archiver::expire() {
  if (policy_.expire_after_h <= 0)
    return;
  std::vector<std::pair<int64_t, int64_t>> held;
  for (auto step : archived_steps(archive_))
    held.emplace_back(
      step, archived_time_ms(archive_ / store::checkpoint_dir_name(step)));
  for (auto step : steps_to_remove(held, policy_, -1, now_ms())) {
    std::error_code ec;
    fs::remove_all(archive_ / store::checkpoint_dir_name(step), ec);
    report_("checkpoint_expired",
            "archived step " + std::to_string(step) + ": older than "
              + std::to_string(policy_.expire_after_h)
              + " h (checkpoint.expire_after_h)",
            -1);
  }
}

} // namespace tutti::lifecycle
