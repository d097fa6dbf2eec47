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
  void at(SteadyClock::time_point when, std::function<void()> fn) {
    timers_.emplace(when, std::move(fn));  // equal times keep insertion order
  }
  bool empty() const noexcept { return timers_.empty(); }
  std::optional<SteadyClock::time_point> next() const {
    if (timers_.empty()) return std::nullopt;
    return timers_.begin()->first;
  }
  // Runs every timer that is due; returns how many ran.
  std::size_t fire_due();

 private:
  std::multimap<SteadyClock::time_point, std::function<void()>> timers_;
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
