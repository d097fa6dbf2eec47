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
