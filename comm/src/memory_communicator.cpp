#include "tutti/comm/memory_communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "sum_overloads.hpp"

namespace tutti::comm {

// What the members of one group share: a barrier that can be aborted and
// timed out, and one slot per member for the buffers of the collective in
// progress.
class memory_group {
public:
  explicit memory_group(int size) : size_(size), slots_(size) {}

  struct slot {
    const void* send = nullptr;
    const int64_t* send_counts = nullptr; // per member, in elements
    const std::vector<std::vector<slice>>* send_runs = nullptr;
    void* data = nullptr; // all-reduce: the member's buffer
  };

  int size() const { return size_; }
  slot& at(int member) { return slots_[member]; }

  // Every member arrives; the last one releases the others. An abort
  // releases everyone with an error; so does the deadline. While it waits,
  // a member with `help` runs other work of the process (memory_options::
  // while_waiting) and adds its time to `lent_s`.
  status arrive(std::chrono::milliseconds timeout, const std::string& who,
                const std::function<bool(double&)>* help = nullptr,
                double* lent_s = nullptr) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_)
      return status::error(who + ": aborted");
    const uint64_t generation = generation_;
    if (release_if_last())
      return {};
    auto released = [&] { return generation_ != generation || aborted_; };
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (help && *help) {
      // Work appears without a notification here: look again after a nap
      // that doubles while there is none.
      constexpr auto first_nap = std::chrono::microseconds(20);
      auto nap = first_nap;
      while (!released() && std::chrono::steady_clock::now() < deadline) {
        lock.unlock();
        double ran_s = 0;
        const bool helped = (*help)(ran_s);
        lock.lock();
        if (helped) {
          *lent_s += ran_s;
          nap = first_nap;
          continue;
        }
        released_.wait_for(lock, nap, released);
        nap = std::min<std::chrono::microseconds>(nap * 2,
                                                  std::chrono::milliseconds(1));
      }
    } else {
      released_.wait_for(lock, timeout, released);
    }
    if (!released())
      return give_up(who, timeout, "");
    if (generation_ == generation)
      return status::error(who + ": aborted");
    return {};
  }

  // The barrier that ends a collective. Past arrive(), every member reads
  // (and a sum writes) its peers' buffers until it comes here; an abort
  // does not release a member early, or it would free a buffer a peer is
  // still copying. The copies are bounded work, so only the deadline ends
  // the wait. (arrive() releases all members or none: either every member
  // is past it and comes here, or none is.)
  status leave(std::chrono::milliseconds timeout, const std::string& who) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (release_if_last())
      return {};
    if (!released_.wait_for(lock, timeout,
                            [&] { return generation_ != generation; }))
      return give_up(who, timeout, " to finish");
    return {};
  }

  // Point-to-point: a message is copied into the group's mailbox when sent
  // and out of it when received, so a send never waits.
  status post(int from, int to, uint32_t tag, const void* data, size_t bytes,
              const std::string& who) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_)
      return status::error(who + ": aborted");
    const auto* in = static_cast<const char*>(data);
    if (!mail_.emplace(std::tuple{from, to, tag},
                       std::vector<char>(in, in + bytes))
           .second)
      return status::error(who + ": a message with tag " + std::to_string(tag)
                           + " to member " + std::to_string(to)
                           + " is still unread");
    released_.notify_all();
    return {};
  }

  status take(int from, int to, uint32_t tag, void* data, size_t bytes,
              std::chrono::milliseconds timeout, const std::string& who) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto key = std::tuple{from, to, tag};
    if (!released_.wait_for(lock, timeout,
                            [&] { return aborted_ || mail_.count(key); }))
      return status::error(who + ": timed out after "
                           + std::to_string(timeout.count())
                           + " ms waiting for member " + std::to_string(from)
                           + "'s message " + std::to_string(tag));
    if (aborted_)
      return status::error(who + ": aborted");
    auto it = mail_.find(key);
    if (it->second.size() != bytes)
      return status::error(who + ": member " + std::to_string(from)
                           + " sent " + std::to_string(it->second.size())
                           + " bytes under tag " + std::to_string(tag) + ", "
                           + std::to_string(bytes) + " expected");
    std::memcpy(data, it->second.data(), bytes);
    mail_.erase(it);
    return {};
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    released_.notify_all();
  }

  bool aborted() {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_;
  }

  // Joining, under the hub's lock.
  int joined = 0;
  std::mutex join_mutex;
  std::condition_variable all_joined;

private:
  // Counts this member in (under the lock); the last one releases all.
  bool release_if_last() {
    if (++arrived_ < size_)
      return false;
    arrived_ = 0;
    ++generation_;
    released_.notify_all();
    return true;
  }

  // Past the deadline (under the lock). Peers that arrive later must fail
  // too, not wait for a member that gave up: a timed-out group is
  // finished.
  status give_up(const std::string& who, std::chrono::milliseconds timeout,
                 const char* what) {
    aborted_ = true;
    released_.notify_all();
    return status::error(who + ": timed out after "
                         + std::to_string(timeout.count())
                         + " ms waiting for the other members" + what);
  }

  const int size_;
  std::vector<slot> slots_;
  std::mutex mutex_;
  std::condition_variable released_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::map<std::tuple<int, int, uint32_t>, std::vector<char>> mail_;
};

status memory_hub::join(const std::string& name, int member, int size,
                        std::chrono::milliseconds timeout,
                        std::shared_ptr<memory_group>& out) {
  std::shared_ptr<memory_group> group;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& entry = forming_[name];
    if (!entry)
      entry = std::make_shared<memory_group>(size);
    group = entry;
    if (group->size() != size)
      return status::error("memory group " + name + ": member "
                           + std::to_string(member) + " expects "
                           + std::to_string(size) + " members, others "
                           + std::to_string(group->size()));
  }
  std::unique_lock<std::mutex> lock(group->join_mutex);
  if (++group->joined == size) {
    {
      // Complete: later groups of this name (none, names carry the epoch)
      // would start afresh.
      std::lock_guard<std::mutex> hub_lock(mutex_);
      forming_.erase(name);
    }
    group->all_joined.notify_all();
  } else if (!group->all_joined.wait_for(
               lock, timeout, [&] { return group->joined == size; })) {
    const int joined = group->joined--;
    if (group->joined == 0) {
      // The last to give up removes the group, so a group that never
      // formed does not stay in the hub.
      std::lock_guard<std::mutex> hub_lock(mutex_);
      auto it = forming_.find(name);
      if (it != forming_.end() && it->second == group)
        forming_.erase(it);
    }
    return status::error("memory group " + name + ": only "
                         + std::to_string(joined) + " of "
                         + std::to_string(size) + " members joined within "
                         + std::to_string(timeout.count()) + " ms");
  }
  out = std::move(group);
  return {};
}

namespace {

class memory_communicator final : public sums_by_template<memory_communicator> {
  friend class sums_by_template<memory_communicator>;

public:
  memory_communicator(std::shared_ptr<memory_group> group, int rank,
                      memory_options options)
    : group_(std::move(group)), rank_(rank), options_(std::move(options)) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  status all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                      void* recv, const std::vector<int64_t>& recv_counts,
                      size_t element_bytes) override {
    const int n = size();
    auto& mine = group_->at(rank_);
    mine.send = send;
    mine.send_counts = send_counts.data();
    mine.send_runs = nullptr;
    TUTTI_RETURN_IF_ERROR(wait_for_members());
    // Read each peer's block for this member straight from its buffer.
    auto* out = static_cast<char*>(recv);
    status result;
    for (int p = 0; p < n; ++p) {
      const auto& peer = group_->at(p);
      if (peer.send_counts == nullptr) {
        if (result.ok())
          result = status::error(describe() + ": member " + std::to_string(p)
                                 + " is in another collective");
        continue;
      }
      int64_t offset = 0;
      for (int q = 0; q < rank_; ++q)
        offset += peer.send_counts[q];
      const int64_t count = peer.send_counts[rank_];
      if (count != recv_counts[p] && result.ok())
        result = status::error(describe() + ": member " + std::to_string(p)
                               + " sends " + std::to_string(count)
                               + " elements, " + std::to_string(recv_counts[p])
                               + " expected");
      const auto bytes = static_cast<size_t>(std::min(count, recv_counts[p]))
                         * element_bytes;
      if (bytes > 0)
        std::memcpy(out,
                    static_cast<const char*>(peer.send)
                      + offset * static_cast<int64_t>(element_bytes),
                    bytes);
      out += recv_counts[p] * static_cast<int64_t>(element_bytes);
    }
    // Nobody reuses a send buffer until every member has read from it.
    TUTTI_RETURN_IF_ERROR(leave());
    return result;
  }

  status all_to_all_runs(const void* send,
                         const std::vector<std::vector<slice>>& send_runs,
                         void* recv,
                         const std::vector<std::vector<slice>>& recv_runs,
                         size_t element_bytes) override {
    const int n = size();
    if (static_cast<int>(send_runs.size()) != n
        || static_cast<int>(recv_runs.size()) != n)
      return status::error(describe() + ": runs for "
                           + std::to_string(send_runs.size()) + " and "
                           + std::to_string(recv_runs.size()) + " members");
    auto& mine = group_->at(rank_);
    mine.send = send;
    mine.send_counts = nullptr;
    mine.send_runs = &send_runs;
    TUTTI_RETURN_IF_ERROR(wait_for_members());
    status result;
    for (int p = 0; p < n && result.ok(); ++p) {
      const auto& peer = group_->at(p);
      if (peer.send_runs == nullptr) {
        result = status::error(describe() + ": member " + std::to_string(p)
                               + " is in another collective");
        break;
      }
      result = copy_runs(peer.send, (*peer.send_runs)[rank_], recv,
                         recv_runs[p], element_bytes, p);
    }
    // Nobody reuses a send buffer until every member has read from it.
    TUTTI_RETURN_IF_ERROR(leave());
    return result;
  }

  status all_to_all(const int64_t* send, int64_t* recv,
                    size_t per_member) override {
    std::vector<int64_t> counts(size(), static_cast<int64_t>(per_member));
    return all_to_all_v(send, counts, recv, counts, sizeof(int64_t));
  }

  status barrier() override { return arrive(); }

  status send(int peer, uint32_t tag, const void* data,
              size_t bytes) override {
    return group_->post(rank_, peer, tag, data, bytes, describe());
  }

  status recv(int peer, uint32_t tag, void* data, size_t bytes) override {
    const auto t0 = std::chrono::steady_clock::now();
    auto got = group_->take(peer, rank_, tag, data, bytes, options_.timeout,
                            describe());
    waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now()
                                               - t0)
                   .count();
    return got;
  }

  bool in_process() const override { return true; }
  bool sums_in_member_order() const override { return true; }
  double waited_s() const override { return waited_s_; }
  double lent_s() const override { return lent_s_; }

  status abort() override {
    group_->abort();
    return {};
  }

  std::string describe() const override {
    return "memory/" + options_.group + " rank " + std::to_string(rank_) + "/"
           + std::to_string(size());
  }

private:
  status arrive() { return group_->arrive(options_.timeout, describe()); }
  status leave() { return group_->leave(options_.timeout, describe()); }

  // Until every member has published its buffers is waiting; the copies
  // after it are the exchange itself. A member that helps a busy peer's
  // shard meanwhile is computing.
  status wait_for_members() {
    const auto t0 = std::chrono::steady_clock::now();
    const double lent_before = lent_s_;
    auto arrived = group_->arrive(options_.timeout, describe(),
                                  &options_.while_waiting, &lent_s_);
    waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now()
                                               - t0)
                   .count()
                 - (lent_s_ - lent_before);
    return arrived;
  }

  // Member `from`'s runs `src` of `send` into this member's runs `dst` of
  // `recv`, walking both in order.
  status copy_runs(const void* send, const std::vector<slice>& src, void* recv,
                   const std::vector<slice>& dst, size_t element_bytes,
                   int from) const {
    int64_t sent = 0, expected = 0;
    for (const auto& r : src)
      sent += r.count;
    for (const auto& r : dst)
      expected += r.count;
    if (sent != expected)
      return status::error(describe() + ": member " + std::to_string(from)
                           + " sends " + std::to_string(sent) + " elements, "
                           + std::to_string(expected) + " expected");
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    const auto bytes = static_cast<int64_t>(element_bytes);
    size_t i = 0, o = 0;
    int64_t in_at = 0, out_at = 0; // elements done of src[i], dst[o]
    while (i < src.size() && o < dst.size()) {
      const int64_t count = std::min(src[i].count - in_at,
                                     dst[o].count - out_at);
      if (count > 0)
        std::memcpy(out + (dst[o].first + out_at) * bytes,
                    in + (src[i].first + in_at) * bytes,
                    static_cast<size_t>(count * bytes));
      in_at += count;
      out_at += count;
      if (in_at == src[i].count) {
        ++i;
        in_at = 0;
      }
      if (out_at == dst[o].count) {
        ++o;
        out_at = 0;
      }
    }
    return {};
  }

  // Member r sums the r-th slice for everyone, in member order, and writes
  // the sum into every member's buffer: each element is read and written by
  // one member only.
  template <class T>
  status reduce(T* data, size_t count) {
    const int n = size();
    if (group_->aborted())
      return status::error(describe() + ": aborted");
    if (n == 1 || count == 0)
      return {};
    group_->at(rank_).data = data;
    TUTTI_RETURN_IF_ERROR(arrive());
    std::vector<T*> buffers(n);
    for (int p = 0; p < n; ++p)
      buffers[p] = static_cast<T*>(group_->at(p).data);
    const size_t slice = (count + n - 1) / n;
    const size_t lo = std::min(count, slice * rank_);
    const size_t hi = std::min(count, lo + slice);
    for (size_t i = lo; i < hi; ++i) {
      T sum = buffers[0][i];
      for (int p = 1; p < n; ++p)
        sum += buffers[p][i];
      for (int p = 0; p < n; ++p)
        buffers[p][i] = sum;
    }
    return leave();
  }

  std::shared_ptr<memory_group> group_;
  int rank_;
  memory_options options_;
  double waited_s_ = 0;
  double lent_s_ = 0;
};

} // namespace

status make_memory_communicator(memory_hub& hub, int rank, int size,
                                const memory_options& options,
                                std::unique_ptr<communicator>& out) {
  std::shared_ptr<memory_group> group;
  TUTTI_RETURN_IF_ERROR(
    hub.join(options.group, rank, size, options.connect_timeout, group));
  out = std::make_unique<memory_communicator>(std::move(group), rank, options);
  return {};
}

} // namespace tutti::comm
