#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;

using namespace mpcache;

namespace {
// Appends its id to the log, yields `yields` times, appends again.
Task<int> worker(Scheduler& s, std::vector<int>& log, int id, int yields) {
  log.push_back(id);
  for (int i = 0; i < yields; ++i) co_await s.schedule();
  log.push_back(100 + id);
  co_return id * 10;
}

Task<void> failing_after(Scheduler& s, int yields, std::string message) {
  for (int i = 0; i < yields; ++i) co_await s.schedule();
  throw std::runtime_error(message);
}
}  // namespace

TEST_CASE("when_all runs children concurrently and keeps argument order") {
  Scheduler s;
  std::vector<int> log;
  auto [a, b, c] = sync_wait(s, when_all(worker(s, log, 1, 2), worker(s, log, 2, 0),
                                         worker(s, log, 3, 1)));
  CHECK(a == 10);
  CHECK(b == 20);
  CHECK(c == 30);
  // All three start before any finishes that had to wait; the one that does
  // not yield finishes first.
  CHECK(log == std::vector<int>{1, 2, 102, 3, 103, 101});
}

TEST_CASE("when_all over a vector returns results in input order") {
  Scheduler s;
  std::vector<int> log;
  std::vector<Task<int>> tasks;
  for (int i = 0; i < 50; ++i) tasks.push_back(worker(s, log, i, (i * 7) % 5));
  auto results = sync_wait(s, when_all(std::move(tasks)));
  REQUIRE(results.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(results[i] == i * 10);
  CHECK(sync_wait(s, when_all(std::vector<Task<int>>{})).empty());
}

TEST_CASE("when_all propagates the first exception after all children finish") {
  Scheduler s;
  std::vector<int> log;
  try {
    sync_wait(s, when_all(worker(s, log, 1, 3), failing_after(s, 1, "second"),
                          failing_after(s, 0, "third")));
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "second");  // by position, not by time
  }
  CHECK(log == std::vector<int>{1, 101});  // the healthy child still completed
}

TEST_CASE("when_all with void tasks and nested when_all") {
  Scheduler s;
  std::vector<int> log;
  auto inner = [&]() -> Task<int> {
    auto [x, y] = co_await when_all(worker(s, log, 1, 1), worker(s, log, 2, 1));
    co_return x + y;
  };
  auto [sum, unit] = sync_wait(s, when_all(inner(), [&]() -> Task<void> {
                                 co_await s.schedule();
                                 log.push_back(7);
                               }()));
  CHECK(sum == 30);
  (void)unit;
  CHECK(std::count(log.begin(), log.end(), 7) == 1);
}

namespace {
// Completes only when the stop signal of the coroutine awaiting it is
// requested (then throws Error(cancelled) naming why); without a signal, or
// if none is requested, it waits for ever (the loop reports a deadlock).
struct UntilStopped {
  Scheduler& scheduler;
  const StopSignal* signal = nullptr;
  struct Wake {
    UntilStopped* self;
    std::coroutine_handle<> h;
    void operator()() const noexcept { self->scheduler.post(h); }
  };
  std::optional<std::stop_callback<Wake>> on_stop{};
  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) {
    signal = stop_signal_of(h);
    if (signal) on_stop.emplace(signal->token(), Wake{this, h});
    return true;
  }
  void await_resume() const { throw Error(ErrorCode::cancelled, signal->why()); }
};

Task<void> wait_until_stopped(Scheduler& s, std::vector<std::string>& log, std::string name) {
  log.push_back(name + " waits");
  try {
    co_await UntilStopped{s};
  } catch (const Error& e) {
    log.push_back(name + ": " + e.what());
    throw;
  }
}

Task<void> fail_after(Scheduler& s, std::vector<std::string>& log, int yields, std::string message) {
  for (int i = 0; i < yields; ++i) co_await s.schedule();
  log.push_back("throw " + message);
  throw std::runtime_error(message);
}
}  // namespace

TEST_CASE("a failed child stops its siblings' waits, and its error propagates") {
  Scheduler s;
  std::vector<std::string> log;
  // The waiters sit before and after the failing child: neither one's
  // cancellation masks the real cause. Without the stop, nothing would ever
  // wake them and the loop would end in a deadlock error.
  CHECK_THROWS_WITH_AS(sync_wait(s, when_all(wait_until_stopped(s, log, "a"), fail_after(s, log, 2, "boom"),
                                             wait_until_stopped(s, log, "b"))),
                       "boom", std::runtime_error);
  REQUIRE(log.size() == 5);
  CHECK(std::vector<std::string>(log.begin(), log.begin() + 3) ==
        std::vector<std::string>{"a waits", "b waits", "throw boom"});
  std::sort(log.begin() + 3, log.end());  // callbacks run in an unspecified order
  CHECK(log[3] == "a: cancelled: a sibling failed: boom");
  CHECK(log[4] == "b: cancelled: a sibling failed: boom");
}

TEST_CASE("a when_all's stop reaches the children of a nested when_all, naming the cause") {
  Scheduler s;
  std::vector<std::string> log;
  auto nested = [&]() -> Task<void> {
    co_await when_all(wait_until_stopped(s, log, "inner"), [&]() -> Task<void> {
      co_await wait_until_stopped(s, log, "deeper");  // a plain co_await passes the signal on
    }());
  };
  CHECK_THROWS_WITH_AS(sync_wait(s, when_all(nested(), fail_after(s, log, 1, "outer failed"))), "outer failed",
                       std::runtime_error);
  REQUIRE(log.size() == 5);
  CHECK(std::vector<std::string>(log.begin(), log.begin() + 3) ==
        std::vector<std::string>{"inner waits", "deeper waits", "throw outer failed"});
  std::sort(log.begin() + 3, log.end());
  CHECK(log[3] == "deeper: cancelled: a sibling failed: outer failed");
  CHECK(log[4] == "inner: cancelled: a sibling failed: outer failed");
}

TEST_CASE("the stop signal is seen through current_stop_token, and only under a when_all") {
  Scheduler s;
  auto probe = []() -> Task<bool> {
    const std::stop_token token = co_await current_stop_token();
    co_return token.stop_possible();
  };
  CHECK_FALSE(sync_wait(s, probe()));  // no when_all above: nothing can stop it
  auto [under, unit] = sync_wait(s, when_all(probe(), [&]() -> Task<void> { co_await s.schedule(); }()));
  (void)unit;
  CHECK(under);
  // Work that does not wait is not interrupted: it sees the stop and runs on.
  std::vector<std::string> log;
  bool saw_stop = false;
  auto watcher = [&]() -> Task<int> {
    const StopSignal* signal = co_await current_stop_signal();
    co_await s.schedule();
    co_await s.schedule();
    saw_stop = signal->stop_requested();
    co_return 1;
  };
  CHECK_THROWS_WITH_AS(sync_wait(s, when_all(watcher(), fail_after(s, log, 1, "late"))), "late", std::runtime_error);
  CHECK(saw_stop);
}
