#include "tutti/dashboard/step_log.hpp"

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

namespace tutti::dashboard {

using json = nlohmann::json;

step_log::step_log(std::filesystem::path file, size_t keep_counts)
  : file_(std::move(file)), keep_counts_(std::max<size_t>(keep_counts, 1)) {}

void step_log::reset() {
  offset_ = 0;
  rows_.clear();
  row_steps_.clear();
  recent_.clear();
  total_.clear();
  total_dropped_ = layers_ = experts_ = 0;
}

void step_log::catch_up() {
  struct stat st {};
  if (::stat(file_.c_str(), &st) != 0) {
    reset();
    return;
  }
  // Replaced (written atomically on a rewind) or cut short: read it anew.
  if (static_cast<uint64_t>(st.st_ino) != inode_
      || static_cast<uintmax_t>(st.st_size) < offset_) {
    reset();
    inode_ = static_cast<uint64_t>(st.st_ino);
  }
  std::ifstream in(file_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof())
      break; // a line still being written: read it next time
    offset_ += line.size() + 1;
    auto record = json::parse(line, nullptr, false);
    if (!record.is_object() || !record.contains("step")
        || !record["step"].is_number_integer())
      continue;
    const auto step = record["step"].get<int64_t>();
    counted c{step, record.value("dropped_tokens", int64_t{0}), {}};
    if (auto e = record.find("expert_counts"); e != record.end()) {
      const auto layers = static_cast<int64_t>(e->size());
      const auto experts = layers > 0 ? static_cast<int64_t>((*e)[0].size())
                                      : int64_t{0};
      if (layers != layers_ || experts != experts_) {
        recent_.clear();
        total_.assign(static_cast<size_t>(layers * experts), 0.0);
        layers_ = layers, experts_ = experts;
      }
      for (const auto& layer : *e)
        for (const auto& n : layer)
          c.counts.push_back(n.get<int64_t>());
      if (static_cast<int64_t>(c.counts.size()) != layers_ * experts_)
        c.counts.clear(); // ragged: not a layer x expert table
      for (size_t i = 0; i < c.counts.size(); ++i)
        total_[i] += static_cast<double>(c.counts[i]);
      record.erase(e);
    }
    total_dropped_ += c.dropped;
    recent_.push_back(std::move(c));
    if (recent_.size() > keep_counts_)
      recent_.pop_front();
    // A rewound file repeats steps: the newer record replaces the older.
    while (!row_steps_.empty() && row_steps_.back() >= step) {
      row_steps_.pop_back();
      rows_.pop_back();
    }
    rows_.push_back(record.dump());
    row_steps_.push_back(step);
  }
}

std::string step_log::json(int64_t since_step, int64_t window,
                           size_t max_rows) {
  std::lock_guard<std::mutex> guard(mutex_);
  catch_up();
  const auto first = std::upper_bound(row_steps_.begin(), row_steps_.end(),
                                      since_step)
                     - row_steps_.begin();
  const size_t count = rows_.size() - static_cast<size_t>(first);
  std::string steps = "[";
  // Thinned evenly when there are more than max_rows; the newest stays.
  const double stride = count > max_rows
                          ? double(count - 1)
                              / double(std::max<size_t>(max_rows, 2) - 1)
                          : 1.0;
  size_t last_taken = SIZE_MAX;
  for (double k = 0; k < double(count) - 0.5; k += stride) {
    const size_t i = static_cast<size_t>(first) + static_cast<size_t>(k + 0.5);
    if (i == last_taken || i >= rows_.size())
      continue;
    if (steps.size() > 1)
      steps += ",";
    steps += rows_[i];
    last_taken = i;
  }
  steps += "]";

  std::vector<double> sum;
  int64_t summed = 0, dropped = 0;
  if (window <= 0) {
    sum = total_;
    summed = static_cast<int64_t>(rows_.size());
    dropped = total_dropped_;
  } else {
    sum.assign(total_.size(), 0.0);
    for (auto it = recent_.rbegin(); it != recent_.rend() && summed < window;
         ++it, ++summed) {
      dropped += it->dropped;
      for (size_t i = 0; i < it->counts.size() && i < sum.size(); ++i)
        sum[i] += static_cast<double>(it->counts[i]);
    }
  }
  nlohmann::json counts = nlohmann::json::array();
  for (int64_t l = 0; l < layers_; ++l)
    counts.push_back(std::vector<double>(sum.begin() + l * experts_,
                                         sum.begin() + (l + 1) * experts_));
  nlohmann::json experts = {{"layers", layers_},
                            {"experts", experts_},
                            {"window", summed},
                            {"counts", std::move(counts)},
                            {"dropped", dropped}};
  return R"({"last_step":)"
         + std::to_string(row_steps_.empty() ? 0 : row_steps_.back())
         + R"(,"steps":)" + steps + R"(,"experts":)" + experts.dump() + "}";
}

} // namespace tutti::dashboard
