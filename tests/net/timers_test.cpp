// TimerQueue's cancel and OwnedTimers: an owner's timers that have not fired
// leave the queue with it. A TCP transport's shutdown waits until its queue
// is empty (emulated links deliver through it), so a server's far-off drain
// deadline used to hold every stop for up to its 30 seconds. The guard of the
// transport case is the test's ctest TIMEOUT (an hour-long timer would
// otherwise hold it), not a timing threshold.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <unistd.h>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;

using namespace mpcache;

TEST_CASE("TimerQueue: a cancelled timer never runs, the others run in time order") {
  TimerQueue q;
  std::vector<int> ran;
  const auto now = SteadyClock::now();
  q.at(now - std::chrono::milliseconds(2), [&] { ran.push_back(1); });
  const auto second = q.at(now - std::chrono::milliseconds(2), [&] { ran.push_back(2); });  // same time as the first
  q.at(now - std::chrono::milliseconds(1), [&] { ran.push_back(3); });
  const auto later = q.at(now + std::chrono::hours(1), [&] { ran.push_back(4); });
  CHECK(q.cancel(second));
  CHECK_FALSE(q.cancel(second));  // already gone
  CHECK(q.fire_due() == 2);
  CHECK(ran == std::vector<int>{1, 3});
  CHECK_FALSE(q.empty());
  CHECK(q.cancel(later));
  CHECK(q.empty());
  CHECK_FALSE(q.cancel(12345));  // never issued
}

TEST_CASE("TimerQueue: a timer that fired cannot be cancelled, and one set from a callback runs later") {
  TimerQueue q;
  int ran = 0;
  TimerQueue::Id inner = 0;
  const auto fired = q.at(SteadyClock::now(), [&] {
    ++ran;
    inner = q.at(SteadyClock::now() + std::chrono::hours(1), [&] { ran += 10; });
  });
  CHECK(q.fire_due() == 1);
  CHECK_FALSE(q.cancel(fired));
  CHECK(ran == 1);
  CHECK(q.cancel(inner));
  CHECK(q.empty());
}

TEST_CASE("OwnedTimers: its pending timers are cancelled with it; fired ones are forgotten") {
  TimerQueue q;
  int ran = 0;
  {
    OwnedTimers owned(q);
    owned.at(SteadyClock::now(), [&] { ++ran; });
    owned.at(SteadyClock::now() + std::chrono::hours(1), [&] { ran += 100; });
    CHECK(owned.pending() == 2);
    CHECK(q.fire_due() == 1);
    CHECK(owned.pending() == 1);
  }
  CHECK(ran == 1);
  CHECK(q.empty());  // the hour-long one went with its owner
  q.at(SteadyClock::now(), [&] { ran += 1000; });  // the queue goes on for others
  CHECK(q.fire_due() == 1);
  CHECK(ran == 1001);
}

TEST_CASE("a TCP transport's shutdown is not held by an owner's timer once the owner is gone") {
  auto mesh = local_socket_mesh(2);
  Scheduler scheduler;
  Endpoint endpoint(scheduler, 0, 2);
  TcpTransport transport(scheduler, endpoint, std::move(mesh[0]), {.silence_timeout = std::chrono::hours(1)});
  bool ran = false;
  {
    OwnedTimers owned(transport.timers());
    owned.at(SteadyClock::now() + std::chrono::hours(1), [&] { ran = true; });
    CHECK_FALSE(transport.timers().empty());
  }
  CHECK(transport.timers().empty());
  transport.shutdown();  // waited for the hour before OwnedTimers (ctest's TIMEOUT ends that)
  CHECK_FALSE(ran);
  for (int fd : mesh[1].fds)
    if (fd >= 0) ::close(fd);
}
