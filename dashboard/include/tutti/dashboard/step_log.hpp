#pragma once
// A training run's step records (RUN_DIR/metrics.jsonl, one JSON object a
// step, written by the coordinator's metrics writer) read as they grow:
// each call reads only the lines appended since the last, and starts over
// when the file was replaced or shortened (a resume rewinds it). Keeps
// every step's scalars, and the expert counts of the last `keep_counts`
// steps plus their total since the start. Thread-safe.

#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace tutti::dashboard {

class step_log {
public:
  explicit step_log(std::filesystem::path file, size_t keep_counts = 256);

  // {"steps": [records after `since_step`, at most max_rows: older ones
  //  thinned evenly, the newest always kept], "last_step": S,
  //  "experts": {"layers": L, "experts": E, "window": steps summed,
  //  "counts": [[...] per layer], "dropped": tokens dropped in them}}.
  // window 0: every step since the start; the counts are summed over the
  // last min(window, keep_counts) steps otherwise.
  std::string json(int64_t since_step, int64_t window, size_t max_rows = 4000);

private:
  void catch_up();
  void reset();

  std::filesystem::path file_;
  size_t keep_counts_;
  std::mutex mutex_;
  uint64_t inode_ = 0;
  uintmax_t offset_ = 0;
  std::vector<std::string> rows_; // each step's record without its counts
  std::vector<int64_t> row_steps_;
  struct counted {
    int64_t step = 0, dropped = 0;
    std::vector<int64_t> counts; // [layer * experts + expert]
  };
  std::deque<counted> recent_;
  std::vector<double> total_;
  int64_t total_dropped_ = 0, layers_ = 0, experts_ = 0;
};

} // namespace tutti::dashboard
