#include "tutti/runtime/log.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>

namespace tutti {

namespace {

std::mutex log_mutex;
std::FILE* log_file = nullptr;
std::string log_node = "0";
std::string log_file_path;

int level_rank(const std::string& level) {
  if (level == "debug")
    return 0;
  if (level == "info")
    return 1;
  if (level == "warn")
    return 2;
  return 3;
}

std::string now_iso8601() {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof(out), "%s.%03lldZ", buf,
                static_cast<long long>(ms));
  return out;
}

void write(const char* level, const std::string& actor,
           const std::string& event) {
  std::lock_guard<std::mutex> guard(log_mutex);
  auto time = now_iso8601();
  if (log_file) {
    // "time" first: merged logs sort by line. Bytes that are not UTF-8
    // become U+FFFD rather than losing the line.
    const nlohmann::ordered_json line{{"time", time},
                                      {"level", level},
                                      {"node", log_node},
                                      {"actor", actor},
                                      {"event", event}};
    std::fprintf(
      log_file, "%s\n",
      line
        .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
        .c_str());
    std::fflush(log_file);
  }
  if (level[0] != 'i')
    std::fprintf(stderr, "tutti: %s: %s: %s\n", level, actor.c_str(),
                 event.c_str());
}

} // namespace

void log_open(const std::string& path, const std::string& node) {
  std::lock_guard<std::mutex> guard(log_mutex);
  if (log_file)
    std::fclose(log_file);
  log_file = std::fopen(path.c_str(), "a");
  log_node = node;
  log_file_path = path;
}

// write() puts "level" right after "time", before any free text, so its
// first occurrence is the field: no need to parse every line of the window
// (this runs on the node supervisor, which also answers heartbeats).
static std::string level_of(const std::string& line) {
  static const std::string key = "\"level\":\"";
  const auto at = line.find(key);
  if (at == std::string::npos)
    return {};
  const auto begin = at + key.size();
  const auto end = line.find('"', begin);
  return end == std::string::npos ? std::string()
                                  : line.substr(begin, end - begin);
}

std::vector<std::string> read_log_lines(const std::string& min_level,
                                        int64_t max_lines) {
  std::string path;
  {
    std::lock_guard<std::mutex> guard(log_mutex);
    path = log_file_path;
  }
  std::deque<std::string> kept;
  std::ifstream in(path);
  std::string line;
  // Only the newest 4 MiB: a bounded read, so the caller's thread (a node
  // supervisor that also sends heartbeats) is never held up for long.
  constexpr std::streamoff window = 4 << 20;
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(in.tellg());
  if (size > window) {
    in.seekg(size - window);
    std::getline(in, line); // a partial line
  } else {
    in.seekg(0);
  }
  const int floor = level_rank(min_level);
  while (std::getline(in, line)) {
    const auto level = level_of(line);
    if (level.empty() || level_rank(level) < floor)
      continue;
    kept.push_back(std::move(line));
    if (max_lines > 0 && static_cast<int64_t>(kept.size()) > max_lines)
      kept.pop_front();
  }
  return {kept.begin(), kept.end()};
}

void log_close() {
  std::lock_guard<std::mutex> guard(log_mutex);
  if (log_file)
    std::fclose(log_file);
  log_file = nullptr;
}

void log_info(const std::string& actor, const std::string& event) {
  write("info", actor, event);
}
void log_warn(const std::string& actor, const std::string& event) {
  write("warn", actor, event);
}
void log_error(const std::string& actor, const std::string& event) {
  write("error", actor, event);
}

} // namespace tutti
