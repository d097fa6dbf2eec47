// Timers for the event loop: callbacks at points in time, run by the loop
// that owns the queue (the TCP transport's, or a TimerLoop where nothing else
// does I/O). Link emulation is built on them.
export module mpcache.net:timers;
import mpcache.std;
import mpcache.async;

export namespace mpcache {

using SteadyClock = std::chrono::steady_clock;

// Callbacks at points in time, run by the event loop that owns the queue.
class TimerQueue {
 public:
  using Id = std::uint64_t;
  // Equal times keep insertion order. The id lets the caller cancel it.
  Id at(SteadyClock::time_point when, std::function<void()> fn) {
    const Id id = ++last_id_;
    timers_.emplace(when, Entry{id, std::move(fn)});
    return id;
  }
  // Removes a timer that has not fired; false if it fired or is unknown.
  // A scan: cancels are rare (an owner's end), while link emulation sets a
  // timer per batch, which an index would tax.
  bool cancel(Id id);
  bool empty() const noexcept { return timers_.empty(); }
  std::optional<SteadyClock::time_point> next() const {
    if (timers_.empty()) return std::nullopt;
    return timers_.begin()->first;
  }
  // Runs every timer that is due; returns how many ran.
  std::size_t fire_due();

 private:
  struct Entry {
    Id id = 0;
    std::function<void()> fn;
  };
  std::multimap<SteadyClock::time_point, Entry> timers_;
  Id last_id_ = 0;
};

// Timers that end with their owner: the ones it set and that have not
// fired are cancelled when it is destroyed. A queue outlives the objects
// that set timers on it (a transport's, which at shutdown waits until its
// queue is empty, for emulated links to deliver), so an owner's far-off
// timer (a 30-second drain deadline) would otherwise hold that wait.
class OwnedTimers {
 public:
  explicit OwnedTimers(TimerQueue& queue) : queue_(queue) {}
  ~OwnedTimers() {
    for (TimerQueue::Id id : pending_) queue_.cancel(id);
  }
  OwnedTimers(const OwnedTimers&) = delete;
  OwnedTimers& operator=(const OwnedTimers&) = delete;
  void at(SteadyClock::time_point when, std::function<void()> fn) {
    auto id = make_shared<TimerQueue::Id>(0);
    // Never runs after our destructor (it cancels the timer), so `this` is alive.
    *id = queue_.at(when, [this, id, fn = std::move(fn)] {
      pending_.erase(*id);
      fn();
    });
    pending_.insert(*id);
  }
  std::size_t pending() const noexcept { return pending_.size(); }

 private:
  TimerQueue& queue_;
  std::set<TimerQueue::Id> pending_;
};

// Timers as the only I/O source of a loop (the in-process transport): when
// nothing is runnable, the loop waits for the next timer.
class TimerLoop final : public IoSource {
 public:
  explicit TimerLoop(Scheduler& scheduler) : scheduler_(scheduler) { scheduler_.add_io_source(this); }
  ~TimerLoop() override { scheduler_.remove_io_source(this); }
  TimerLoop(const TimerLoop&) = delete;
  TimerLoop& operator=(const TimerLoop&) = delete;
  TimerQueue& timers() noexcept { return timers_; }
  bool has_pending() const override { return !timers_.empty(); }
  void poll(bool block) override;
  // With other sources, only time wakes it: no descriptors, the next timer.
  bool wait_fds(std::vector<WaitFd>&) override { return true; }
  std::optional<SteadyClock::time_point> next_wake() const override { return timers_.next(); }

 private:
  Scheduler& scheduler_;
  TimerQueue timers_;
};

}  // namespace mpcache
