#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;

using namespace mpcache;

namespace {
Task<int> answer(int& runs) {
  ++runs;
  co_return 42;
}

Task<int> add_one(Task<int> inner) { co_return 1 + co_await std::move(inner); }

Task<void> fail_with(const char* message) {
  throw Error(ErrorCode::protocol, message);
  co_return;
}

Task<int> depth(int n) {
  if (n == 0) co_return 0;
  co_return 1 + co_await depth(n - 1);
}

Task<long> many_sync_awaits(int n) {
  long total = 0;
  for (int i = 0; i < n; ++i) {
    int runs = 0;
    total += co_await answer(runs);
  }
  co_return total;
}

struct Tracker {
  int* alive;
  explicit Tracker(int* a) : alive(a) { ++*alive; }
  Tracker(const Tracker&) = delete;
  ~Tracker() { --*alive; }
};

Task<int> holds_tracker(int* alive, bool throw_it) {
  Tracker t(alive);
  if (throw_it) throw std::runtime_error("boom");
  co_return 1;
}
}  // namespace

TEST_CASE("a task is lazy: nothing runs until it is awaited") {
  Scheduler s;
  int runs = 0;
  Task<int> t = answer(runs);
  CHECK(runs == 0);
  CHECK(sync_wait(s, std::move(t)) == 42);
  CHECK(runs == 1);
}

TEST_CASE("results flow through nested awaits") {
  Scheduler s;
  int runs = 0;
  CHECK(sync_wait(s, add_one(add_one(answer(runs)))) == 44);
}

TEST_CASE("exceptions propagate out of awaits and sync_wait") {
  Scheduler s;
  try {
    sync_wait(s, fail_with("bad frame"));
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::protocol);
    CHECK(std::string(e.what()).find("bad frame") != std::string::npos);
  }
}

TEST_CASE("frames are freed: unawaited, finished, and failed tasks") {
  Scheduler s;
  int alive = 0;
  {
    Task<int> never = holds_tracker(&alive, false);  // not started: no frame body ran
    CHECK(alive == 0);
  }
  CHECK(sync_wait(s, holds_tracker(&alive, false)) == 1);
  CHECK(alive == 0);
  CHECK_THROWS_AS(sync_wait(s, holds_tracker(&alive, true)), std::runtime_error);
  CHECK(alive == 0);
}

TEST_CASE("deep recursion of synchronously completing tasks does not grow the stack") {
  Scheduler s;
  // 200k nested frames: with a call per level this would overflow an 8 MiB stack.
  CHECK(sync_wait(s, depth(200000)) == 200000);
  CHECK(sync_wait(s, many_sync_awaits(1000000)) == 42000000L);
}

TEST_CASE("moving a task transfers ownership") {
  Scheduler s;
  int runs = 0;
  Task<int> a = answer(runs);
  Task<int> b = std::move(a);
  CHECK_FALSE(a.valid());
  CHECK(b.valid());
  CHECK(sync_wait(s, std::move(b)) == 42);
}
