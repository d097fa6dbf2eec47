#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
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
