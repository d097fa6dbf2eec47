// Scheduler: a single-threaded run loop owned by the caller. Work that is
// ready runs until none is left (one "tick"); then tick listeners run (the
// network flushes everything sent during the tick as one write per peer), and
// I/O sources are polled: blocking (one system call submits and waits) when
// nothing is runnable, otherwise flushed so sends leave before more work runs.
// When every task waits and nothing is in flight, the loop reports a deadlock
// naming what is being waited for instead of hanging.
//
// Waiting on several sources: one source with pending work blocks in its own
// poll(true) (the fast path of a party's mesh). Two or more sleep together in
// one ppoll(2) on the descriptors they give (IoSource::wait_fds) until the
// earliest time one must act (next_wake), after a short spin; then each source
// whose descriptor is ready or whose time has come is polled without blocking.
// A source that gives no descriptors makes the loop block in that source.
export module mpcache.async:scheduler;
import mpcache.std;

export namespace mpcache {

// Something that wants to act at the end of every tick (e.g. flush sends).
class TickListener {
 public:
  virtual ~TickListener() = default;
  virtual void on_tick_end() = 0;
  // What this listener's tasks are blocked on, for deadlock reports ("" if none).
  virtual std::string describe_waiting() const { return {}; }
};

// A descriptor an I/O source waits on: readable (read) and/or writable (write).
struct WaitFd {
  int fd = -1;
  bool read = true;
  bool write = false;
};

// Something that completes work from outside the loop (sockets, timers).
class IoSource {
 public:
  virtual ~IoSource() = default;
  virtual bool has_pending() const = 0;
  // Wait (if `block`) for at least one completion and post the woken tasks.
  // A blocking poll also hands the kernel everything queued since the last
  // one, in the same system call.
  virtual void poll(bool block) = 0;
  // Hand queued operations to the kernel now: called at the end of a tick
  // when the loop goes on running tasks instead of blocking in poll().
  virtual void flush() {}
  // Appends the descriptors whose readiness lets poll(false) make progress;
  // returns false if this source cannot be waited on that way (then the loop
  // blocks in its poll(true)). Called right before the loop sleeps.
  virtual bool wait_fds(std::vector<WaitFd>& /*out*/) { return false; }
  // The earliest time this source must be polled even if no descriptor is
  // ready (deadlines, timers; a time already past: now).
  virtual std::optional<std::chrono::steady_clock::time_point> next_wake() const { return std::nullopt; }
  // How long the loop may look for readiness without sleeping, yielding the
  // CPU in between, before it sleeps on this source with others (a wake-up
  // from another core costs tens of microseconds; see TcpOptions::spin).
  virtual std::chrono::nanoseconds spin_budget() const { return std::chrono::nanoseconds{0}; }
};

class Scheduler {
 public:
  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queue a suspended coroutine to run in this tick.
  void post(std::coroutine_handle<> h) { ready_.push_back(h); }

  // `co_await scheduler.schedule()` re-queues the caller behind current work.
  // (A named member type, not one local to schedule(): a reduced BMI keeps
  // no body for a local type's members, and importers could not call them.)
  struct ScheduleAwaiter {
    Scheduler* self;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const { self->post(h); }
    void await_resume() const noexcept {}
  };
  ScheduleAwaiter schedule() noexcept { return ScheduleAwaiter{this}; }

  void add_listener(TickListener* l) { listeners_.push_back(l); }
  void remove_listener(TickListener* l);
  void add_io_source(IoSource* s) { io_sources_.push_back(s); }
  void remove_io_source(IoSource* s);

  // Runs ticks until `done()` holds. Throws Error(deadlock) when nothing can
  // make progress.
  void run_until(const std::function<bool()>& done);

  // A tick that has run this long ends early: sends leave and arrivals are
  // taken in before the rest of the ready work runs. Zero (the default): a
  // tick runs until nothing is ready.
  void set_tick_budget(std::chrono::nanoseconds budget) { tick_budget_ = budget; }

 private:
  // Runs ready work; false if the tick budget ended it with work left.
  bool run_ready();
  std::chrono::nanoseconds tick_budget_{0};
  // Sleeps once on every source in `pending` (two or more) and polls those
  // that became ready; false if one cannot be waited on that way (`blocker`).
  bool wait_on_all(const std::vector<IoSource*>& pending, IoSource*& blocker);
  // Whether `s` is still registered (a poll may destroy another source).
  bool registered(const IoSource* s) const;
  std::deque<std::coroutine_handle<>> ready_;
  std::vector<TickListener*> listeners_;
  std::vector<IoSource*> io_sources_;
  // Spinning is paused for this many multi-source waits after a yield came
  // back late (the core is busy with other work; see TcpTransport's spin).
  std::uint32_t spin_paused_ = 0;
};

}  // namespace mpcache
