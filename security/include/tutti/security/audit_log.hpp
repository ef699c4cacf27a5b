#pragma once
// The audit log: one JSON line per operator action or refusal, appended to
// a file in which each record carries the hash of the one before it
// (SHA-256 over the previous hash and the record's own fields). Editing,
// removing or reordering a record breaks the chain at that record, and
// verify_audit_log names it.

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::security {

struct audit_record {
  int64_t seq = 0;        // 1, 2, ...
  std::string time;       // UTC, ISO 8601 with milliseconds
  std::string user;       // who (certificate CN, or "local")
  std::string role;       // the role they held ("" none)
  std::string source;     // where the request came from
  std::string command;    // shell command or CLI action
  std::string target;     // its arguments
  std::string decision;   // allowed | refused
  std::string result;     // what came of it, or why it was refused
  std::string prev, hash; // the chain

  std::string json_line() const; // without the newline
};

class audit_log {
public:
  // Opens (or creates, mode 0600) `path` and continues its chain. Fails if
  // the existing file does not verify: a broken log is not extended.
  static expected<audit_log> open(const std::string& path);

  // Fills seq, time (when empty), prev and hash; appends and flushes.
  expected<audit_record> append(audit_record record);
  const std::string& path() const { return path_; }

private:
  std::string path_;
  int64_t last_seq_ = 0;
  std::string last_hash_;
};

// The records of a log file as written (no checks).
expected<std::vector<audit_record>> read_audit_log(const std::string& path);

// Checks the chain: ok, or the first record that was edited, removed or
// moved, named by its number and line ("record 7 (line 7) was edited: its
// hash does not match its fields").
status verify_audit_log(const std::string& path);

} // namespace tutti::security
