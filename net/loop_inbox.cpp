// LoopInbox (see modules/net/loop_inbox.cppm): a mutex-guarded queue of
// callbacks and an eventfd that says "look at the queue".
module;
#include "prelude.hpp"
#include <atomic>
#include <cerrno>
#include <mutex>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
module mpcache.net;
import mpcache.core;
import mpcache.async;

namespace mpcache {

struct LoopInbox::Impl {
  int event_fd = -1;
  std::mutex mutex;
  std::deque<std::function<void()>> queue;  // guarded by mutex
  std::atomic<std::size_t> queued{0};       // queue.size(), readable without the lock
  std::atomic<bool> alive{false};

  struct Wake {
    Impl* impl;
    void operator()() const noexcept { impl->signal(); }
  };
  std::optional<std::stop_callback<Wake>> on_stop;

  void signal() noexcept {
    const std::uint64_t one = 1;
    (void)!::write(event_fd, &one, sizeof one);  // only fails when the count would overflow: still readable
  }
  void drain() noexcept {
    std::uint64_t count = 0;
    (void)!::read(event_fd, &count, sizeof count);
  }
};

LoopInbox::LoopInbox(Scheduler& scheduler) : impl_(std::make_unique<Impl>()), scheduler_(scheduler) {
  impl_->event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->event_fd < 0)
    throw Error(ErrorCode::io, std::string("loop inbox: eventfd failed: ") + std::strerror(errno));
  scheduler_.add_io_source(this);
}

LoopInbox::~LoopInbox() {
  scheduler_.remove_io_source(this);
  impl_->on_stop.reset();  // no stop callback may signal a closed descriptor
  ::close(impl_->event_fd);
}

void LoopInbox::post(std::function<void()> fn) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->queue.push_back(std::move(fn));
    impl_->queued.fetch_add(1);
  }
  impl_->signal();
}

void LoopInbox::keep_alive(bool on) {
  impl_->alive.store(on);
  if (!on) impl_->signal();
}

void LoopInbox::wake() { impl_->signal(); }

void LoopInbox::wake_on_stop(std::stop_token token) {
  impl_->on_stop.reset();
  impl_->on_stop.emplace(std::move(token), Impl::Wake{impl_.get()});
}

bool LoopInbox::has_pending() const { return impl_->alive.load() || impl_->queued.load() > 0; }

bool LoopInbox::wait_fds(std::vector<WaitFd>& out) {
  out.push_back(WaitFd{impl_->event_fd, true, false});
  return true;
}

void LoopInbox::poll(bool block) {
  auto& I = *impl_;
  if (block && I.queued.load() == 0) {
    pollfd fd{I.event_fd, POLLIN, 0};
    (void)::ppoll(&fd, 1, nullptr, nullptr);  // EINTR: the loop comes back
  }
  // Reset the eventfd before taking the queue: a post after this signals it
  // again, so the loop's next sleep cannot miss it.
  I.drain();
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard lock(I.mutex);
    batch.swap(I.queue);
    I.queued.store(0);
  }
  while (!batch.empty()) {
    auto fn = std::move(batch.front());
    batch.pop_front();
    try {
      fn();
    } catch (...) {
      // The rest stay queued, ahead of later posts.
      std::lock_guard lock(I.mutex);
      I.queue.insert(I.queue.begin(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
      I.queued.store(I.queue.size());
      if (!I.queue.empty()) I.signal();
      throw;
    }
  }
}

}  // namespace mpcache
