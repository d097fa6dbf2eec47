// Scopes on an endpoint: a service's sessions share one mesh, and cancelling
// one session's scope ends its receives at every party and no others.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

using namespace mpcache;

namespace {
constexpr StreamId in_scope(ScopeId scope, std::uint64_t low) { return (StreamId{scope} << scope_shift) | low; }
std::vector<std::byte> word(std::uint8_t v) { return {std::byte{v}}; }
}  // namespace

TEST_CASE("cancelling a scope ends its receives at both parties and leaves other scopes running") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 2);
  Endpoint& a = network.endpoint(0);
  Endpoint& b = network.endpoint(1);
  std::string a_error, b_error;
  std::vector<std::byte> other;
  auto waits_in_3 = [&](Endpoint& e, std::string& error) -> Task<void> {
    try {
      (void)co_await e.recv(1 - e.id(), in_scope(3, 42));
    } catch (const Error& err) {
      error = err.what();
    }
  };
  auto scope_4 = [&]() -> Task<void> {
    co_await scheduler.schedule();
    a.cancel_scope(3, "session 3: its client went away");
    a.send(1, in_scope(4, 1), word(7));
    other = co_await b.recv(0, in_scope(4, 1));
  };
  sync_wait(scheduler, when_all(waits_in_3(a, a_error), waits_in_3(b, b_error), scope_4()));
  CHECK(a_error == "cancelled: party 0: session 3: its client went away");
  CHECK(b_error == "cancelled: party 1: party 0 cancelled session 3: its client went away");
  CHECK(other == word(7));
  CHECK(b.scope_cancelled(3) == "party 0 cancelled session 3: its client went away");
  CHECK(a.scope_cancelled(4).empty());
  // A later receive in the scope fails at once; its late frames are dropped.
  a.send(1, in_scope(3, 42), word(1));
  std::string late;
  auto again = [&]() -> Task<void> {
    try {
      (void)co_await b.recv(0, in_scope(3, 42));
    } catch (const Error& err) {
      late = err.what();
    }
  };
  sync_wait(scheduler, again());
  CHECK(late == "cancelled: party 1: party 0 cancelled session 3: its client went away");
  b.open_scope(3);
  CHECK(b.scope_cancelled(3).empty());
  CHECK_THROWS_AS(a.cancel_scope(no_scope, "x"), Error);
}

TEST_CASE("idle receives do not move the round clock") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 2);
  Endpoint& a = network.endpoint(0);
  Endpoint& b = network.endpoint(1);
  auto exchange = [&]() -> Task<void> {
    a.send(1, 5, word(1));
    (void)co_await b.recv_idle(0, 5);
    b.send(0, 6, word(2));
    (void)co_await a.recv(1, 6);
  };
  sync_wait(scheduler, exchange());
  CHECK(b.rounds() == 0);  // the idle receive took a frame but no round
  CHECK(a.rounds() == 1);  // b's reply: clock 0 + 1
}

TEST_CASE("a long run's cancelled scopes cost a bit each; only the latest keep their reasons") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 2);
  Endpoint& a = network.endpoint(0);
  for (ScopeId s = 1; s <= 3000; ++s) a.cancel_scope(s, "session " + std::to_string(s) + " failed");
  CHECK(a.stream_counts().cancelled_scopes == 3000);
  CHECK(a.scope_cancelled(3000) == "session 3000 failed");  // among the latest 1024
  CHECK(a.scope_cancelled(1) == "scope 1 cancelled");       // still cancelled, its reason forgotten
  a.open_scope(1);
  a.open_scope(2000);
  CHECK(a.scope_cancelled(1).empty());
  CHECK(a.stream_counts().cancelled_scopes == 2998);
  // Cancelled again after it was opened: its new reason stays, however the old one aged.
  a.cancel_scope(2000, "session 2000 failed again");
  for (ScopeId s = 4000; s < 4000 + 1023; ++s) a.cancel_scope(s, "x");
  CHECK(a.scope_cancelled(2000) == "session 2000 failed again");
  // A late frame of an old cancelled scope is still dropped, not held (the
  // frame after it, in no scope, arrives after it).
  auto late = [&]() -> Task<void> {
    network.endpoint(1).send(0, in_scope(5, 9), word(1));
    network.endpoint(1).send(0, 77, word(2));
    const auto next = co_await a.recv(1, 77);
    CHECK(next == word(2));
  };
  sync_wait(scheduler, late());
  CHECK(a.stream_counts().holding == 0);
}
