#pragma once
// The durable state of one daemon: job spec, job state,
// committed checkpoints and an append-only event log, in one RocksDB under
// the daemon's data dir. This header is the whole interface: nothing outside
// store/ sees RocksDB (pimpl), so the engine never depends on its headers.
//
// Column families: "job_spec", "job_state", "checkpoints", "events",
// "config_versions", "routing_stats". Values
// are msgpack maps keyed by field name, so fields can be added later.
// Thread-safe: one job_store may be shared by the actors of a daemon.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::store {

// A checkpoint the coordinator committed: every shard and the MANIFEST were
// fsynced before this record was written, so its presence means "complete".
struct checkpoint_record {
  std::int64_t step = 0;         // >= 0; the key (one record per step)
  std::string dir;               // the step-XXXXXXXX directory
  std::int64_t bytes = 0;        // total size of its files
  std::int64_t time_unix_ms = 0; // commit time; 0 on commit means "now"
  std::int64_t epoch = 0;        // membership epoch it was taken in
};

// One entry of the event log (job started, checkpoint committed / failed /
// skipped as corrupt, resume, failures, recoveries).
struct event {
  std::int64_t seq = 0;          // 1, 2, 3, ... in append order
  std::int64_t time_unix_ms = 0; // wall time of the append
  std::string kind;              // e.g. "checkpoint_committed"
  std::string detail;            // one human-readable line
  double duration_s = -1;        // -1 = none
};

// One version of the job's config: the first start, and every start with
// a changed config or a rollback after it.
struct config_version_record {
  std::int64_t version = 0;      // 1, 2, 3, ...; the key
  std::int64_t time_unix_ms = 0; // 0 on put means "now"
  std::string who;               // user@host and the command
  std::string reason;            // "start", "change", "rollback ..."
  std::string config_yaml;       // the config as given
  std::string values;            // every key, "section.key=value" lines
  std::string diff;              // against the version before it
};

class job_store {
public:
  // Opens (creating if missing, parents included) the store in `dir`. A
  // store already open, by another process or by this one, is refused with
  // "job store <dir> is locked ..."; a damaged one with "... is corrupt ...".
  static expected<std::unique_ptr<job_store>> open(
    const std::filesystem::path& dir);
  // The same store, read-only, while another process may hold it open
  // (tutti experts stats on a live job's run directory).
  static expected<std::unique_ptr<job_store>> open_read_only(
    const std::filesystem::path& dir);
  ~job_store();
  job_store(const job_store&) = delete;
  job_store& operator=(const job_store&) = delete;

  const std::filesystem::path& dir() const;

  // The job's identity: the config fingerprint and the config as YAML text.
  // Committed with sync: on success it survives power loss.
  status put_job_spec(const std::string& fingerprint,
                      const std::string& config_yaml);
  // nullopt when no job spec was ever stored (or after reset()).
  expected<std::optional<std::pair<std::string, std::string>>> job_spec();

  // Lifecycle state ("running", "completed", "failed", ...) and the step it
  // was reached at. Committed with sync.
  status put_job_state(const std::string& state, std::int64_t step);
  expected<std::optional<std::pair<std::string, std::int64_t>>> job_state();

  // Records a committed checkpoint (replaces a record with the same step).
  // Call only after all its files are durable; committed with sync.
  status commit_checkpoint(const checkpoint_record& r);
  // All committed checkpoints, ascending step.
  expected<std::vector<checkpoint_record>> checkpoints();
  // Forgets the record (retention deletes the files). Idempotent: removing a
  // step that has no record succeeds. Committed with sync.
  status remove_checkpoint(std::int64_t step);

  // Appends an event stamped with the current wall time; returns its seq.
  // Sequence numbers continue after reopen. Not synced on its own: events
  // reach the OS at once (a killed process loses none) and the next synced
  // commit makes them power-loss durable too (one write-ahead log, in order).
  expected<std::int64_t> append_event(const std::string& kind,
                                      const std::string& detail,
                                      double duration_s = -1);
  // Events with time_unix_ms >= since_unix_ms, in seq order.
  expected<std::vector<event>> events(std::int64_t since_unix_ms = 0);

  // Config versions (column family "config_versions"), committed with
  // sync; a version already stored is replaced.
  status put_config_version(const config_version_record& r);
  // All versions, ascending.
  expected<std::vector<config_version_record>> config_versions();
  // Routing statistics of one window of steps ending at last_step (JSON
  // text, placement/routing_stats.hpp), and all windows by step.
  status put_routing_window(std::int64_t last_step, const std::string& json);
  expected<std::vector<std::pair<std::int64_t, std::string>>>
  routing_windows();

  // Deletes every record of every column family (for `--fresh`), synced.
  // Event sequence numbers start again at 1.
  status reset();

private:
  struct impl;
  explicit job_store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace tutti::store
