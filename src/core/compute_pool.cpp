// ComputePool (modules/core/compute_pool.cppm): N - 1 jthreads that sleep on
// a condition variable until run() publishes a job, then take parts from a
// shared counter alongside the caller.
module;
#include "prelude.hpp"
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
module mpcache.core;

namespace mpcache {

namespace {

// One run(): the parts are taken in order from `next`. Shared with the
// threads, so that one that wakes after the caller has finished (and
// returned) still finds a valid job, with nothing left to take.
struct Job {
  void (*call)(void*, std::size_t);
  void* body;
  std::size_t parts;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> finished{0};  // parts run or skipped
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first, under Impl::mutex
};

}  // namespace

struct ComputePool::Impl {
  std::mutex turn;  // one run() at a time
  std::mutex mutex;
  std::condition_variable wake;  // threads: a job or the end
  std::condition_variable done;  // caller: every part finished
  std::shared_ptr<Job> job;
  std::uint64_t generation = 0;
  bool stopping = false;
  std::atomic<std::thread::id> runner{};  // the thread inside run(), if any
  std::vector<std::thread::id> thread_ids;
  std::vector<std::jthread> threads;

  // Takes parts until none is left; counts each one finished.
  void work(Job& j) {
    for (;;) {
      const std::size_t i = j.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= j.parts) return;
      if (!j.failed.load(std::memory_order_relaxed)) {
        try {
          j.call(j.body, i);
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!j.error) j.error = std::current_exception();
          j.failed.store(true, std::memory_order_relaxed);
        }
      }
      // The notify is under the lock: the caller checks under it, so it
      // cannot miss the last part between its check and its wait.
      if (j.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == j.parts) {
        std::lock_guard lock(mutex);
        done.notify_one();
      }
    }
  }

  void thread_main() {
    std::uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> current;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
        current = job;  // null if the caller finished the job before this thread woke
      }
      if (current) work(*current);
    }
  }

  bool inside_run() const {
    const auto self = std::this_thread::get_id();
    return runner.load() == self || std::find(thread_ids.begin(), thread_ids.end(), self) != thread_ids.end();
  }
};

ComputePool::ComputePool(std::size_t threads) : threads_(threads), impl_(std::make_unique<Impl>()) {
  if (threads == 0 || threads > max_threads)
    throw Error(ErrorCode::invalid_argument, "compute pool: " + std::to_string(threads) +
                                                 " threads, expected 1 to " + std::to_string(max_threads));
  impl_->threads.reserve(threads - 1);
  for (std::size_t t = 1; t < threads; ++t) {
    impl_->threads.emplace_back([impl = impl_.get()] { impl->thread_main(); });
    impl_->thread_ids.push_back(impl_->threads.back().get_id());
  }
}

ComputePool::~ComputePool() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->threads.clear();  // jthreads join
}

void ComputePool::run_erased(std::size_t parts, void (*call)(void*, std::size_t), void* body) {
  if (parts == 0) return;
  if (threads_ == 1 || parts == 1 || impl_->inside_run()) {
    for (std::size_t i = 0; i < parts; ++i) call(body, i);
    return;
  }
  std::lock_guard turn(impl_->turn);
  impl_->runner.store(std::this_thread::get_id());
  auto job = std::make_shared<Job>();
  job->call = call;
  job->body = body;
  job->parts = parts;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->job = job;
    ++impl_->generation;
  }
  impl_->wake.notify_all();
  impl_->work(*job);
  {
    std::unique_lock lock(impl_->mutex);
    impl_->done.wait(lock, [&] { return job->finished.load(std::memory_order_acquire) == parts; });
    impl_->job.reset();
  }
  impl_->runner.store(std::thread::id{});
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace mpcache
