#include "tutti/model/idle_core_pool.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "tutti/kernels/stream.hpp"

namespace tutti::model {

namespace {

// One call of run(): its tasks are claimed by index, by the caller and by
// pool threads alike.
struct batch {
  const std::vector<std::function<void()>>* tasks = nullptr;
  std::atomic<size_t> next{0};
  size_t finished = 0; // under the pool's lock
  int visitors = 0;    // pool threads holding a pointer to it, ditto
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
  std::condition_variable work;
  std::deque<batch*> open; // batches with tasks left to claim
  std::vector<std::thread> threads;
  int64_t members = 0;
  std::atomic<int64_t> lent{0};
  bool stopping = false;

  void serve() {
    // BLAS pinned to one thread here as on every rank and shard thread:
    // the same kernels, the same bits.
    kernels::use_single_threaded_blas();
    std::unique_lock guard(lock);
    for (;;) {
      work.wait(guard, [&] { return stopping || !open.empty(); });
      if (stopping)
        return;
      batch* b = open.front();
      ++b->visitors; // the caller waits for it before b goes away
      guard.unlock();
      const bool ran = b->run_one(lock);
      guard.lock();
      if (ran)
        lent.fetch_add(1);
      else
        drop(b);
      if (--b->visitors == 0)
        b->done.notify_all();
    }
  }

  void drop(batch* b) {
    for (auto it = open.begin(); it != open.end(); ++it)
      if (*it == b) {
        open.erase(it);
        return;
      }
  }
};

idle_core_pool& idle_core_pool::process() {
  static idle_core_pool pool;
  return pool;
}

idle_core_pool::impl& idle_core_pool::get() {
  static std::once_flag once;
  std::call_once(once, [this] { impl_ = new impl; });
  return *impl_;
}

idle_core_pool::~idle_core_pool() {
  if (!impl_)
    return;
  {
    std::lock_guard guard(impl_->lock);
    impl_->stopping = true;
  }
  impl_->work.notify_all();
  for (auto& t : impl_->threads)
    t.join();
  delete impl_;
}

void idle_core_pool::join() {
  auto& p = get();
  std::lock_guard guard(p.lock);
  ++p.members;
  while (static_cast<int64_t>(p.threads.size()) < p.members - 1)
    p.threads.emplace_back([&p] { p.serve(); });
}

void idle_core_pool::leave() {
  auto& p = get();
  std::lock_guard guard(p.lock);
  --p.members;
}

int64_t idle_core_pool::threads() const {
  if (!impl_)
    return 0;
  std::lock_guard guard(impl_->lock);
  return static_cast<int64_t>(impl_->threads.size());
}

int64_t idle_core_pool::lent_tasks() const {
  return impl_ ? impl_->lent.load() : 0;
}

void idle_core_pool::run(const std::vector<std::function<void()>>& tasks) {
  auto& p = get();
  batch b;
  b.tasks = &tasks;
  const bool lend = tasks.size() > 1 && threads() > 0;
  if (lend) {
    {
      std::lock_guard guard(p.lock);
      p.open.push_back(&b);
    }
    p.work.notify_all();
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

} // namespace tutti::model
