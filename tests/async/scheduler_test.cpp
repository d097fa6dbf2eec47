#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <thread>
#include <fcntl.h>
#include <unistd.h>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;

using namespace mpcache;

namespace {
struct CountingListener : TickListener {
  int ticks = 0;
  void on_tick_end() override { ++ticks; }
};

// Never resumed: waits for something that nobody will deliver.
struct Forever {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};

struct WaitingListener : TickListener {
  void on_tick_end() override {}
  std::string describe_waiting() const override { return "party 1 <- party 2 on stream 9"; }
};

// A source whose work arrives on a pipe (a byte resumes the waiting task),
// or at a time (`wake_at`); it counts how it is polled.
struct PipeSource : IoSource {
  Scheduler& scheduler;
  int fds[2] = {-1, -1};
  bool gives_fds = true;
  std::optional<std::chrono::steady_clock::time_point> wake_at;
  std::coroutine_handle<> waiter;
  int blocking_polls = 0, polls = 0;

  explicit PipeSource(Scheduler& s) : scheduler(s) {
    REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
    scheduler.add_io_source(this);
  }
  ~PipeSource() override {
    scheduler.remove_io_source(this);
    ::close(fds[0]);
    ::close(fds[1]);
  }
  bool has_pending() const override { return true; }
  void poll(bool block) override {
    ++(block ? blocking_polls : polls);
    char c;
    const bool byte = ::read(fds[0], &c, 1) == 1;
    const bool due = wake_at && *wake_at <= std::chrono::steady_clock::now();
    if ((byte || due) && waiter) scheduler.post(std::exchange(waiter, {}));
  }
  bool wait_fds(std::vector<WaitFd>& out) override {
    if (gives_fds) out.push_back(WaitFd{fds[0], true, false});
    return gives_fds;
  }
  std::optional<std::chrono::steady_clock::time_point> next_wake() const override { return wake_at; }

  struct Awaiter {
    PipeSource* source;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const noexcept { source->waiter = h; }
    void await_resume() const noexcept {}
  };
  Awaiter next() { return Awaiter{this}; }
};
}  // namespace

TEST_CASE("schedule() runs work in FIFO order within one tick") {
  Scheduler s;
  CountingListener listener;
  s.add_listener(&listener);
  std::vector<int> order;
  auto task = [&](int id) -> Task<void> {
    co_await s.schedule();
    order.push_back(id);
  };
  sync_wait(s, when_all(task(1), task(2), task(3)));
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK(listener.ticks == 1);  // everything finished in a single tick
  s.remove_listener(&listener);
}

TEST_CASE("a loop with nothing to do and nothing in flight reports a deadlock") {
  Scheduler s;
  WaitingListener waiting;
  s.add_listener(&waiting);
  try {
    sync_wait(s, []() -> Task<void> { co_await Forever{}; }());
    FAIL("no deadlock reported");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::deadlock);
    CHECK(std::string(e.what()).find("party 1 <- party 2 on stream 9") != std::string::npos);
  }
  s.remove_listener(&waiting);
}

TEST_CASE("with two sources pending the loop sleeps on both and polls only the one that is ready") {
  Scheduler s;
  PipeSource idle(s), busy(s);  // idle first: the loop used to block in the first source
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(::write(busy.fds[1], "x", 1) == 1);
  });
  sync_wait(s, [](PipeSource& src) -> Task<void> { co_await src.next(); }(busy));
  writer.join();
  CHECK(idle.blocking_polls + idle.polls + busy.blocking_polls == 0);
  CHECK(busy.polls >= 1);  // a signal may end a sleep early: then it is polled again
}

TEST_CASE("with two sources pending the loop wakes at the earlier one's next_wake") {
  Scheduler s;
  PipeSource idle(s), timed(s);
  timed.wake_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  sync_wait(s, [](PipeSource& src) -> Task<void> { co_await src.next(); }(timed));
  CHECK(std::chrono::steady_clock::now() >= *timed.wake_at);
  CHECK(idle.blocking_polls + idle.polls + timed.blocking_polls == 0);
}

TEST_CASE("a source that gives no descriptors makes the loop block in it, as with one source") {
  Scheduler s;
  PipeSource other(s), opaque(s);
  opaque.gives_fds = false;
  CHECK(::write(opaque.fds[1], "x", 1) == 1);
  sync_wait(s, [](PipeSource& src) -> Task<void> { co_await src.next(); }(opaque));
  CHECK(opaque.blocking_polls == 1);
  CHECK(other.blocking_polls == 0);
}

namespace {
// Tick ends, each with how many of the busy tasks had finished by then.
struct RecordingListener : TickListener {
  const std::vector<int>& done;
  std::vector<std::size_t> at_tick_end;
  explicit RecordingListener(const std::vector<int>& d) : done(d) {}
  void on_tick_end() override { at_tick_end.push_back(done.size()); }
};

void spin_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Four tasks of 1 ms each and one that waits on a pipe holding a byte
// already. Returns the tick ends, and whether the pipe was polled (without
// blocking) before the last busy task ran.
std::pair<std::vector<std::size_t>, bool> run_busy_ticks(std::chrono::microseconds budget) {
  Scheduler s;
  s.set_tick_budget(budget);
  std::vector<int> done;
  RecordingListener listener(done);
  s.add_listener(&listener);
  PipeSource source(s);
  REQUIRE(::write(source.fds[1], "x", 1) == 1);
  bool polled_mid_work = false;
  auto busy = [&](int id) -> Task<void> {
    co_await s.schedule();
    if (id == 4) polled_mid_work = source.polls > 0;
    spin_for(std::chrono::microseconds(1000));
    done.push_back(id);
  };
  auto reader = [&]() -> Task<void> { co_await source.next(); };
  sync_wait(s, when_all(reader(), busy(1), busy(2), busy(3), busy(4)));
  s.remove_listener(&listener);
  return {listener.at_tick_end, polled_mid_work};
}
}  // namespace

TEST_CASE("without a tick budget a tick runs all ready work before anything is sent or received") {
  const auto [tick_ends, polled_mid_work] = run_busy_ticks(std::chrono::microseconds(0));
  REQUIRE(!tick_ends.empty());
  CHECK(tick_ends.front() == 4);  // the first sends leave after all four tasks
  CHECK_FALSE(polled_mid_work);
}

TEST_CASE("a tick budget ends a long tick: sends leave and arrivals come in before the rest of the work runs") {
  const auto [tick_ends, polled_mid_work] = run_busy_ticks(std::chrono::microseconds(300));
  // Each 1 ms task overruns the budget: the tick ends after it, four times.
  REQUIRE(tick_ends.size() >= 4);
  CHECK(std::vector<std::size_t>(tick_ends.begin(), tick_ends.begin() + 4) == std::vector<std::size_t>{1, 2, 3, 4});
  CHECK(polled_mid_work);  // the pipe was read while work was still queued
}
