#include "tutti/train/journal.hpp"

#include <ctime>

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "tutti/runtime/log.hpp"
#include "tutti/lifecycle/checkpoint_tiers.hpp"
#include "tutti/lifecycle/config_versions.hpp"
#include "tutti/protocol/errors.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/checksum.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti {

namespace {

namespace fs = std::filesystem;

struct journal_state {
  journal_state() = default; // not an aggregate (see checkpoint_writer)
  static inline const char* name = "journal";
  job_config cfg;
  std::shared_ptr<store::job_store> db;
  // checkpoint.archive_dir: the background copier (its own thread).
  std::unique_ptr<lifecycle::archiver> archive;

  void event(const std::string& kind, const std::string& detail,
             double duration = -1) {
    if (auto seq = db->append_event(kind, detail, duration); !seq.ok())
      log_error("journal", seq.message());
  }

  // Hashes every shard, writes the MANIFEST, records the checkpoint.
  expected<int64_t> commit(int64_t step, int64_t world, int64_t epoch) {
    const auto dir = fs::path(cfg.checkpoint.root(cfg.run))
                     / store::checkpoint_dir_name(step);
    store::manifest m;
    m.step = step;
    m.epoch = epoch;
    m.world_size = world;
    int64_t total = 0;
    for (int64_t r = 0; r < world; ++r) {
      auto entry = store::describe_shard(dir / store::shard_file_name(r));
      if (!entry.ok())
        return status::error(entry.message());
      total += static_cast<int64_t>(entry.value().bytes);
      m.shards.push_back(std::move(entry.value()));
    }
    if (auto err = store::write_manifest(dir, m); !err)
      return err;
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    if (auto err = db->commit_checkpoint(
          {step, dir.string(), total, now, epoch});
        !err)
      return err;
    retain();
    return total;
  }

  // Keeps the newest keep_last, the milestones, and what is not yet
  // archived; removes what expired. The one just committed (verified by
  // hashing) is the newest, so it is never the one removed.
  void retain() {
    auto all = db->checkpoints();
    if (!all.ok()) {
      log_error("journal", all.message());
      return;
    }
    const auto policy = lifecycle::retention_of(cfg.checkpoint);
    std::vector<std::pair<int64_t, int64_t>> held;
    for (const auto& c : all.value())
      held.emplace_back(c.step, c.time_unix_ms);
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    for (auto step :
         lifecycle::steps_to_remove(held, policy, policy.keep_last, now)) {
      if (archive && archive->pending(step))
        continue; // removed after its copy, at a later commit
      const auto& old = *std::find_if(
        all.value().begin(), all.value().end(),
        [step](const auto& c) { return c.step == step; });
      if (auto err = db->remove_checkpoint(old.step); !err) {
        log_error("journal", err.message());
        continue;
      }
      std::error_code ec;
      fs::remove_all(old.dir, ec);
      event("checkpoint_removed",
            "step " + std::to_string(old.step) + " (" + old.dir
              + "): retention keep_last "
              + std::to_string(cfg.checkpoint.keep_last)
              + (cfg.checkpoint.expire_after_h > 0
                   ? ", expire_after_h "
                       + std::to_string(cfg.checkpoint.expire_after_h)
                   : std::string()));
    }
  }
};

using journal_pointer = journal_actor::stateful_pointer<journal_state>;

journal_actor::behavior_type journal(journal_pointer self, job_config cfg,
                                     std::shared_ptr<store::job_store> db) {
  self->state.cfg = std::move(cfg);
  self->state.db = std::move(db);
  if (const auto& to = self->state.cfg.checkpoint.archive_dir; !to.empty())
    self->state.archive = std::make_unique<lifecycle::archiver>(
      to, lifecycle::retention_of(self->state.cfg.checkpoint),
      [db = self->state.db](const std::string& kind, const std::string& detail,
                            double seconds) {
        if (kind == "checkpoint_archive_failed")
          log_error("journal", kind + ": " + detail);
        else
          log_info("journal", kind + ": " + detail);
        if (auto seq = db->append_event(kind, detail, seconds); !seq.ok())
          log_error("journal", seq.message());
      });
  return {
    [self](const commit_request& req) -> caf::result<int64_t> {
      auto& st = self->state;
      const auto step = req.step;
      const auto t0 = std::chrono::steady_clock::now();
      auto done = st.commit(step, req.world_size, req.epoch);
      const double took = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
      if (!done.ok()) {
        st.event("checkpoint_failed",
                 "step " + std::to_string(step) + ": " + done.message(), took);
        return caf::make_error(errc::data_failed, done.message());
      }
      st.event("checkpoint_committed",
               "step " + std::to_string(step) + ", "
                 + std::to_string(done.value()) + " bytes",
               took);
      if (st.archive)
        st.archive->enqueue(step, fs::path(st.cfg.checkpoint.root(st.cfg.run))
                                    / store::checkpoint_dir_name(step));
      return done.value();
    },
    [self](const job_event& e) {
      self->state.event(e.kind, e.text, e.seconds);
    },
    [self](routing_window_atom, int64_t last_step, const std::string& json) {
      if (auto err = self->state.db->put_routing_window(last_step, json); !err)
        log_error("journal", err.message());
    },
    [self](events_atom, int64_t since_unix_ms) -> std::vector<std::string> {
      std::vector<std::string> out;
      auto all = self->state.db->events(since_unix_ms);
      if (!all.ok())
        return {"(cannot read the event log: " + all.message() + ")"};
      for (const auto& e : all.value()) {
        auto secs = static_cast<std::time_t>(e.time_unix_ms / 1000);
        std::tm tm{};
        gmtime_r(&secs, &tm);
        char when[32];
        std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        auto line = std::string(when) + "  " + e.kind + "  " + e.detail;
        if (e.duration_s >= 0)
          line += "  (" + std::to_string(e.duration_s) + " s)";
        out.push_back(std::move(line));
      }
      return out;
    },
    [self](config_atom, const std::vector<std::string>& args)
      -> caf::result<std::vector<std::string>> {
      auto lines = lifecycle::version_lines(*self->state.db, args);
      if (!lines)
        return caf::make_error(errc::config_refused, lines.message());
      return *lines;
    },
    [self](const job_final_state& end) {
      if (auto err = self->state.db->put_job_state(end.state, end.last_step);
          !err)
        log_error("journal", err.message());
    },
  };
}

} // namespace

journal_actor spawn_journal(caf::actor_system& sys, job_config cfg,
                            std::shared_ptr<store::job_store> db) {
  return sys.spawn<caf::detached>(journal, std::move(cfg), std::move(db));
}

} // namespace tutti
