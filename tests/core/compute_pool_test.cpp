// ComputePool: every part runs once, the caller takes part, exceptions
// reach the caller, the destructor joins, and odd uses (zero parts, one
// thread, nested and concurrent run()) neither hang nor lose work.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <doctest/doctest.h>
import mpcache.core;

using namespace mpcache;

TEST_CASE("compute pool: every part runs exactly once, for 1 to 4 threads") {
  for (std::size_t threads = 1; threads <= 4; ++threads) {
    ComputePool pool(threads);
    CHECK(pool.threads() == threads);
    for (std::size_t parts : {1u, 2u, 3u, 7u, 64u, 1000u}) {
      std::vector<std::atomic<int>> runs(parts);
      pool.run(parts, [&](std::size_t i) { runs[i].fetch_add(1); });
      for (std::size_t i = 0; i < parts; ++i) CHECK_MESSAGE(runs[i].load() == 1, threads << " threads, part " << i << " of " << parts);
    }
  }
}

TEST_CASE("compute pool: zero parts return at once without calling the body") {
  ComputePool pool(3);
  int calls = 0;
  pool.run(0, [&](std::size_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("compute pool: one thread starts none and runs on the caller's thread") {
  ComputePool pool(1);
  std::set<std::thread::id> seen;
  pool.run(5, [&](std::size_t) { seen.insert(std::this_thread::get_id()); });
  CHECK(seen == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE("compute pool: the pool's threads do take parts") {
  ComputePool pool(2);
  std::mutex m;
  std::set<std::thread::id> seen;
  // Each part waits until two threads have shown up, so a single thread
  // would never finish: the test ends only if the pool's thread works.
  std::atomic<int> arrived{0};
  pool.run(2, [&](std::size_t) {
    {
      std::lock_guard lock(m);
      seen.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
  });
  CHECK(seen.size() == 2);
  CHECK(seen.count(std::this_thread::get_id()) == 1);  // the caller took one
}

TEST_CASE("compute pool: an exception reaches the caller and the pool stays usable") {
  for (std::size_t threads : {1u, 2u, 4u}) {
    ComputePool pool(threads);
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(pool.run(16,
                                  [&](std::size_t i) {
                                    ran.fetch_add(1);
                                    if (i == 3) throw Error(ErrorCode::invalid_argument, "part 3 failed");
                                  }),
                         doctest::Contains("part 3 failed"), Error);
    CHECK(ran.load() >= 1);
    CHECK(ran.load() <= 16);
    // The next run is complete: the failure left nothing behind.
    std::vector<std::atomic<int>> runs(9);
    pool.run(9, [&](std::size_t i) { runs[i].fetch_add(1); });
    for (auto& r : runs) CHECK(r.load() == 1);
  }
}

TEST_CASE("compute pool: when several parts throw, one of their exceptions is rethrown") {
  ComputePool pool(3);
  try {
    pool.run(30, [](std::size_t i) { throw std::runtime_error("part " + std::to_string(i)); });
    FAIL("run() returned although every part threw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).starts_with("part "));
  }
}

TEST_CASE("compute pool: a body that calls run() on the same pool runs the inner parts itself") {
  ComputePool pool(2);
  std::vector<std::atomic<int>> runs(4 * 5);
  pool.run(4, [&](std::size_t outer) {
    pool.run(5, [&](std::size_t inner) { runs[outer * 5 + inner].fetch_add(1); });
  });
  for (auto& r : runs) CHECK(r.load() == 1);
}

TEST_CASE("compute pool: run() from two threads at once takes turns, losing nothing") {
  ComputePool pool(3);
  std::atomic<long> sum{0};
  auto many = [&] {
    for (int round = 0; round < 50; ++round) pool.run(8, [&](std::size_t i) { sum.fetch_add(long(i) + 1); });
  };
  {
    std::jthread other(many);
    many();
  }
  CHECK(sum.load() == 2 * 50 * 36);
}

TEST_CASE("compute pool: the destructor joins its threads, also right after a run") {
  std::atomic<int> finished{0};
  for (int i = 0; i < 20; ++i) {
    ComputePool pool(4);
    pool.run(4, [&](std::size_t) { finished.fetch_add(1); });
  }  // a thread still running here would outlive `finished`'s users: ASan/TSan see it
  CHECK(finished.load() == 80);
  ComputePool never_used(4);  // destroyed without a run: joins idle threads
}

TEST_CASE("compute pool: a bad thread count is an error naming it") {
  CHECK_THROWS_WITH_AS(ComputePool(0), doctest::Contains("0 threads"), Error);
  CHECK_THROWS_WITH_AS(ComputePool(ComputePool::max_threads + 1), doctest::Contains("expected 1 to 256"), Error);
}

TEST_CASE("compute pool: parts_for gives one part per thread above the grain") {
  ComputePool two(2), four(4);
  CHECK(parts_for(nullptr, 1 << 30, 1) == 1);
  CHECK(parts_for(&two, 100, 10) == 2);
  CHECK(parts_for(&four, 100, 10) == 4);
  CHECK(parts_for(&four, 25, 10) == 2);  // no part under the grain
  CHECK(parts_for(&four, 9, 10) == 1);
  CHECK(parts_for(&four, 0, 10) == 1);
}
