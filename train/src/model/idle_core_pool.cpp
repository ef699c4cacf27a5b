#include "tutti/train/idle_core_pool.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

namespace tutti::train {

namespace {

// One call of run(): its tasks are claimed by index, by the caller and by
// helpers alike.
struct batch {
  const std::vector<std::function<void()>>* tasks = nullptr;
  std::atomic<size_t> next{0};
  size_t finished = 0; // under the pool's lock
  int visitors = 0;    // helpers holding a pointer to it, ditto
  std::exception_ptr error;
  std::condition_variable done;

  // Claims and runs one task; false when none is left to claim.
  bool run_one(std::mutex& lock_of_pool) {
    const size_t i = next.fetch_add(1);
    if (i >= tasks->size())
      return false;
    std::exception_ptr failed;
    try {
      (*tasks)[i]();
    } catch (...) {
      failed = std::current_exception();
    }
    std::lock_guard lock(lock_of_pool);
    if (failed && !error)
      error = failed;
    if (++finished == tasks->size())
      done.notify_all();
    return true;
  }
};

} // namespace

struct idle_core_pool::impl {
  std::mutex lock;
  std::deque<batch*> open; // batches that may have tasks left to claim
  int64_t members = 0;
  std::atomic<int64_t> lent{0};

  void drop(batch* b) {
    for (auto it = open.begin(); it != open.end(); ++it)
      if (*it == b) {
        open.erase(it);
        return;
      }
  }
};

idle_core_pool& idle_core_pool::process() {
  // Built before anyone can ask for work, and never destroyed: a rank still
  // waiting in an exchange while the process exits may look for work.
  static idle_core_pool* pool = new idle_core_pool;
  return *pool;
}

idle_core_pool::idle_core_pool() : impl_(new impl) {}

idle_core_pool::impl& idle_core_pool::get() { return *impl_; }

void idle_core_pool::join() {
  auto& p = get();
  std::lock_guard guard(p.lock);
  ++p.members;
}

void idle_core_pool::leave() {
  auto& p = get();
  std::lock_guard guard(p.lock);
  --p.members;
}

int64_t idle_core_pool::members() const {
  std::lock_guard guard(impl_->lock);
  return impl_->members;
}

int64_t idle_core_pool::lent_tasks() const { return impl_->lent.load(); }

bool idle_core_pool::help_one(double* ran_s) {
  auto& p = *impl_;
  std::unique_lock guard(p.lock);
  while (!p.open.empty()) {
    batch* b = p.open.front();
    ++b->visitors; // its run() waits for us before b goes away
    guard.unlock();
    const auto start = std::chrono::steady_clock::now();
    const bool ran = b->run_one(p.lock);
    if (ran && ran_s)
      *ran_s = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                             - start)
                 .count();
    guard.lock();
    if (!ran)
      p.drop(b); // every task claimed: nothing left for anyone here
    if (--b->visitors == 0)
      b->done.notify_all();
    if (ran) {
      p.lent.fetch_add(1);
      return true;
    }
  }
  return false;
}

void idle_core_pool::run(const std::vector<std::function<void()>>& tasks) {
  auto& p = get();
  batch b;
  b.tasks = &tasks;
  const bool lend = tasks.size() > 1 && members() > 1;
  if (lend) {
    std::lock_guard guard(p.lock);
    p.open.push_back(&b);
  }
  while (b.run_one(p.lock)) {
  }
  std::unique_lock guard(p.lock);
  if (lend)
    p.drop(&b);
  b.done.wait(guard,
              [&] { return b.finished == tasks.size() && b.visitors == 0; });
  if (b.error)
    std::rethrow_exception(b.error);
}

} // namespace tutti::train
