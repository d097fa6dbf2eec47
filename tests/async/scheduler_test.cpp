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
