#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;

using namespace mpcache;

TEST_CASE("a cut link fails the waiting receiver with a network error naming the peer") {
  Scheduler s;
  InProcessNetwork net(s, 3);
  auto waiter = [&]() -> Task<void> { (void)co_await net.endpoint(0).recv(2, 1); };
  auto killer = [&]() -> Task<void> {
    co_await s.schedule();
    net.cut(2, 0);
  };
  try {
    sync_wait(s, when_all(waiter(), killer()));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::network);
    CHECK(std::string(e.what()).find("party 2") != std::string::npos);
  }
  // Later receives on the dead link fail at once, not by deadlock.
  try {
    sync_wait(s, waiter());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::network);
  }
}

TEST_CASE("a party that aborts tells its peers why, and the first reason stays") {
  Scheduler s;
  InProcessNetwork net(s, 3);
  auto waiter = [&]() -> Task<void> { (void)co_await net.endpoint(0).recv(1, 9); };
  auto aborter = [&]() -> Task<void> {
    co_await s.schedule();
    net.endpoint(1).abort("party 1: link to party 2 failed: gone");
    net.endpoint(0).fail(1, "party 1 closed the connection");  // its close, later: not the reason
  };
  CHECK_THROWS_WITH(sync_wait(s, when_all(waiter(), aborter())),
                    doctest::Contains("party 0: link to party 1 failed: party 1 stopped: party 1: link to party 2 failed: gone"));
  CHECK_THROWS_WITH(sync_wait(s, waiter()), doctest::Contains("party 1 stopped"));
}

TEST_CASE("the in-process transport names itself and counts parties") {
  Scheduler s;
  InProcessNetwork net(s, 3);
  CHECK(net.parties() == 3);
  CHECK(net.name() == "in-process");
  CHECK(net.endpoint(2).transport() == &net);
  CHECK(net.endpoint(2).parties() == 3);
}

TEST_CASE("a failed sibling ends a receive at once, not at the link's silence deadline") {
  Scheduler s;
  InProcessNetwork net(s, 3);
  TimerLoop timers(s);
  // The silence deadline of the link to party 1, which never sends: had the
  // receive waited on, this would fail it 30 s from now (and the loop keeps
  // running until then instead of reporting a deadlock).
  bool deadline_hit = false;
  timers.timers().at(SteadyClock::now() + std::chrono::seconds(30), [&] {
    deadline_hit = true;
    net.endpoint(0).fail(1, "silent for 30 s");
  });
  std::string receiver_error;
  auto receiver = [&]() -> Task<void> {
    try {
      (void)co_await net.endpoint(0).recv(1, 42);
    } catch (const Error& e) {
      receiver_error = e.what();
      throw;
    }
  };
  auto failing = [&]() -> Task<void> {
    co_await s.schedule();
    throw Error(ErrorCode::protocol, "party 0: bad share");
  };
  // The receiver comes first: its cancellation does not mask the cause.
  CHECK_THROWS_WITH(sync_wait(s, when_all(receiver(), failing())), "protocol error: party 0: bad share");
  CHECK_FALSE(deadline_hit);  // the loop returned before the deadline
  CHECK(receiver_error == "cancelled: party 0: a sibling failed: protocol error: party 0: bad share");
  // Only that wait ended: the party is not cancelled, nothing was sent, and
  // the message, when it comes, waits for the next receive.
  CHECK_FALSE(net.endpoint(0).cancelled());
  CHECK(net.endpoint(1).costs().per_peer[0].messages_received == 0);
  auto later = [&]() -> Task<std::size_t> {
    net.endpoint(1).send(0, 42, std::vector<std::byte>(3));
    co_return (co_await net.endpoint(0).recv(1, 42)).size();
  };
  CHECK(sync_wait(s, later()) == 3);
  CHECK_FALSE(deadline_hit);
}
