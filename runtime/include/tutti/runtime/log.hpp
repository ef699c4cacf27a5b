#pragma once
// The project's logger (CAF's own log is compiled out in Debian's build):
// JSON lines to the run's log file; warnings and errors also to stderr as
// one readable line. Thread-safe.

#include <cstdint>
#include <string>
#include <vector>

namespace tutti {

// Opens (appends to) the log file; until then only stderr is written.
void log_open(const std::string& path, const std::string& node);
void log_close();

void log_info(const std::string& actor, const std::string& event);
void log_warn(const std::string& actor, const std::string& event);
void log_error(const std::string& actor, const std::string& event);

// The last `max_lines` lines of this process's log file at `min_level`
// (debug < info < warn < error) or above, oldest first, from the file's
// newest 4 MiB.
std::vector<std::string> read_log_lines(const std::string& min_level,
                                        int64_t max_lines);

} // namespace tutti
