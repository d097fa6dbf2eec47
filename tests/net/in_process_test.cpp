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
