#include "node/replica_store.hpp"

namespace tutti {

void replica_store::put(int64_t world, rank_snapshot_ptr snap) {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto epoch = snap->epoch, step = snap->step;
  auto& steps = copies_[{epoch, snap->rank}];
  steps[step] = {world, std::move(snap)};
  while (steps.size() > 3)
    steps.erase(steps.begin());
  // Epochs older than the one before this: superseded.
  for (auto i = copies_.begin(); i != copies_.end();)
    i = i->first.first < epoch - 1 ? copies_.erase(i) : std::next(i);
}

std::vector<replica_held> replica_store::held() const {
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<replica_held> out;
  for (const auto& [key, steps] : copies_)
    for (const auto& [step, e] : steps)
      out.push_back({key.first, e.world, step, key.second});
  return out;
}

rank_snapshot_ptr replica_store::find(int64_t epoch, int64_t step,
                                      int64_t rank) const {
  std::lock_guard<std::mutex> guard(mutex_);
  auto i = copies_.find({epoch, rank});
  if (i == copies_.end())
    return nullptr;
  auto j = i->second.find(step);
  return j == i->second.end() ? nullptr : j->second.snap;
}

} // namespace tutti
