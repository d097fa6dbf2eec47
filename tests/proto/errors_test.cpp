#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;
using mpcache::testing::random_ring;
using mpcache::testing::run_rss3;

namespace {
template <class Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no mpcache::Error thrown");
  return Error(ErrorCode::protocol, "unreachable");
}

bool mentions(const Error& e, std::string_view text) {
  return std::string_view(e.what()).find(text) != std::string_view::npos;
}
}  // namespace

TEST_CASE("rss3 set-up needs exactly three parties") {
  Scheduler s;
  InProcessNetwork two(s, 2);
  auto e = error_of([&] { (void)sync_wait(s, Rss3Party::setup(two.endpoint(0))); });
  CHECK(e.code() == ErrorCode::bad_party);
  CHECK(mentions(e, "exactly 3"));
}

TEST_CASE("parties that would truncate differently stop at set-up, naming the setting") {
  // Party 1 alone asks for exact truncation: its messages would not match.
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto party = [&](PartyId id) -> Task<void> {
    (void)co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = id == 1});
  };
  auto e = error_of([&] { sync_wait(scheduler, when_all(party(0), party(1), party(2))); });
  CHECK(e.code() == ErrorCode::invalid_argument);
  CHECK(mentions(e, "exact truncation"));
  CHECK(mentions(e, "probabilistic truncation"));
}

TEST_CASE("shape mismatches in products are clear errors") {
  const RingTensor x = random_ring({2, 3}, 1), y = random_ring({3, 2}, 2);
  auto e = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      auto a = co_await p.input(0, p.holds_input(0) ? std::optional(x) : std::nullopt, {2, 3});
      auto b = co_await p.input(0, p.holds_input(0) ? std::optional(y) : std::nullopt, {3, 2});
      (void)co_await p.mul(a, b);
      co_return 0;
    });
  });
  CHECK(e.code() == ErrorCode::invalid_argument);
  CHECK(mentions(e, "(2,3) vs (3,2)"));
  auto e2 = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      auto a = co_await p.input(0, p.holds_input(0) ? std::optional(x) : std::nullopt, {2, 3});
      (void)co_await p.matmul(a, a);
      co_return 0;
    });
  });
  CHECK(mentions(e2, "expected (m,k) x (k,n)"));
}

TEST_CASE("wrong owners and misplaced values are refused") {
  const RingTensor x = random_ring({4}, 3);
  auto bad_owner = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      (void)co_await p.input(5, std::nullopt, {4});
      co_return 0;
    });
  });
  CHECK(bad_owner.code() == ErrorCode::bad_party);
  CHECK(mentions(bad_owner, "owner 5"));
  auto missing = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      (void)co_await p.input(1, std::nullopt, {4});
      co_return 0;
    });
  });
  CHECK(missing.code() == ErrorCode::invalid_argument);
  CHECK(mentions(missing, "owns this input"));
  auto wrong_shape = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      (void)co_await p.input(1, p.holds_input(1) ? std::optional(x) : std::nullopt, {5});
      co_return 0;
    });
  });
  CHECK(mentions(wrong_shape, "declared shape is (5)"));
  auto bad_receiver = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      auto a = co_await p.input(1, p.holds_input(1) ? std::optional(x) : std::nullopt, {4});
      (void)co_await p.reveal_to(3, a);
      co_return 0;
    });
  });
  CHECK(bad_receiver.code() == ErrorCode::bad_party);
}

TEST_CASE("a peer that sends the wrong amount of data is named in a protocol error") {
  // Party 2 believes the tensor has 5 elements, the others 4.
  const RingTensor x = random_ring({4}, 3);
  auto e = error_of([&] {
    run_rss3([&](Rss3& p) -> Task<int> {
      const Shape shape = p.party_id() == 2 ? Shape{5} : Shape{4};
      RingTensor mine = ring_zeros(shape);
      auto a = co_await p.input(2, p.holds_input(2) ? std::optional(mine) : std::nullopt, shape);
      (void)a;
      co_return 0;
    });
  });
  CHECK(e.code() == ErrorCode::protocol);
  CHECK(mentions(e, "party 2 sent 40 bytes, expected 32"));
}

TEST_CASE("a dead peer makes a waiting party fail with a network error, not hang") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  const RingTensor x = random_ring({4}, 3);
  auto party = [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id));
    Rss3 p = state->session();
    auto a = co_await p.input(0, p.holds_input(0) ? std::optional(x) : std::nullopt, {4});
    if (id == 1) {
      network.cut(1, 0);  // party 1 dies before multiplying
      network.cut(1, 2);
      co_return;
    }
    (void)co_await p.mul(a, a);
  };
  auto e = error_of([&] { sync_wait(scheduler, when_all(party(0), party(1), party(2))); });
  CHECK(e.code() == ErrorCode::network);
  CHECK(mentions(e, "party 1"));
}
