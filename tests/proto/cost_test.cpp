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

// Exact communication of every rss3 operation: payload bytes per party and
// rounds, with the inputs prepared before the measurement starts.
namespace {
constexpr std::size_t n = 1000;
constexpr std::uint64_t elems = n * sizeof(Ring);

std::optional<RingTensor> owned(const Rss3& p, PartyId owner, const RingTensor& v) {
  return p.holds_input(owner) ? std::optional<RingTensor>(v) : std::nullopt;
}

struct Measured {
  std::array<std::uint64_t, 3> bytes{};
  std::array<std::uint64_t, 3> messages{};
  std::uint64_t rounds = 0;  // growth of the highest clock: the critical path
};

template <class Op>
Measured measure(Shape sa, Shape sb, Op op) {
  const RingTensor x = random_ring(sa, 1), y = random_ring(sb, 2);
  Measured m;
  std::array<std::uint64_t, 3> clock_before{}, clock_after{};
  // Counters are read around the op alone, after key set-up and inputs.
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto party = [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false});
    Rss3 p = state->session();
    auto a = co_await p.input(0, owned(p, 0, x), sa);
    auto b = co_await p.input(1, owned(p, 1, y), sb);
    const CostCounters before = network.endpoint(id).costs();
    co_await op(p, a, b);
    const CostCounters d = network.endpoint(id).costs() - before;
    m.bytes[id] = d.payload_bytes_sent();
    m.messages[id] = d.messages_sent();
    clock_before[id] = before.rounds;
    clock_after[id] = before.rounds + d.rounds;
  };
  sync_wait(scheduler, when_all(party(0), party(1), party(2)));
  m.rounds = *std::max_element(clock_after.begin(), clock_after.end()) -
             *std::max_element(clock_before.begin(), clock_before.end());
  return m;
}
}  // namespace

TEST_CASE("input: the owner sends n elements to each peer, one round") {
  const RingTensor x = random_ring({n}, 3);
  for (PartyId owner = 0; owner < 3; ++owner) {
    auto run = run_rss3([&](Rss3& p) -> Task<int> {
      (void)co_await p.input(owner, owned(p, owner, x), {n});
      co_return 0;
    });
    for (PartyId id = 0; id < 3; ++id)
      CHECK(run.costs[id].payload_bytes_sent() == (id == owner ? 2 * elems : 0));
    CHECK(run.max_rounds() == 1);
  }
}

TEST_CASE("reveal: n elements per party; reveal_to: n elements from one party") {
  auto all = measure({n}, {n}, [](Rss3& p, auto& a, auto&) -> Task<void> {
    (void)co_await p.reveal(a);
  });
  CHECK(all.bytes == std::array<std::uint64_t, 3>{elems, elems, elems});
  CHECK(all.rounds == 1);
  auto one = measure({n}, {n}, [](Rss3& p, auto& a, auto&) -> Task<void> {
    (void)co_await p.reveal_to(0, a);
  });
  CHECK(one.bytes == std::array<std::uint64_t, 3>{0, 0, elems});  // party 2 = prev of 0
  CHECK(one.rounds == 1);
}

TEST_CASE("mul and matmul: one element per output per party, one round") {
  auto mul = measure({n}, {n}, [](Rss3& p, auto& a, auto& b) -> Task<void> {
    (void)co_await p.mul(a, b);
  });
  CHECK(mul.bytes == std::array<std::uint64_t, 3>{elems, elems, elems});
  CHECK(mul.messages == std::array<std::uint64_t, 3>{1, 1, 1});
  CHECK(mul.rounds == 1);
  // (4 x 250) x (250 x 250): 1000 outputs.
  auto mm = measure({4, 250}, {250, 250}, [](Rss3& p, auto& a, auto& b) -> Task<void> {
    (void)co_await p.matmul(a, b);
  });
  CHECK(mm.bytes == std::array<std::uint64_t, 3>{elems, elems, elems});
  CHECK(mm.rounds == 1);
}

TEST_CASE("truncation: party 0 sends n elements, one round; fused products one round") {
  auto tr = measure({n}, {n}, [](Rss3& p, auto& a, auto&) -> Task<void> {
    (void)co_await p.truncate(a, 18);
  });
  CHECK(tr.bytes == std::array<std::uint64_t, 3>{elems, 0, 0});
  CHECK(tr.rounds == 1);
  auto mt = measure({n}, {n}, [](Rss3& p, auto& a, auto& b) -> Task<void> {
    (void)co_await p.mul_trunc(a, b);
  });
  CHECK(mt.bytes == std::array<std::uint64_t, 3>{elems, elems, elems});
  CHECK(mt.rounds == 1);
  auto mmt = measure({4, 250}, {250, 250}, [](Rss3& p, auto& a, auto& b) -> Task<void> {
    (void)co_await p.matmul_trunc(a, b);
  });
  CHECK(mmt.bytes == std::array<std::uint64_t, 3>{elems, elems, elems});
  CHECK(mmt.rounds == 1);
}

TEST_CASE("concurrent forked multiplications share one round and one write per peer") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  const RingTensor x = random_ring({n}, 4);
  std::array<CostCounters, 3> before;
  auto party = [&](PartyId id) -> Task<std::vector<Rss3Share>> {
    // Seeded keys and a sharing of a public value: no message before the
    // products, so every counter below belongs to them.
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .insecure_seed = 1});
    Rss3 p = state->session();
    auto a = p.add_public(Rss3Share{ring_zeros({n}), ring_zeros({n})}, x);
    before[id] = network.endpoint(id).costs();
    std::vector<Rss3> forks;
    for (int i = 0; i < 8; ++i) forks.push_back(p.fork());
    std::vector<Task<Rss3Share>> products;
    for (auto& f : forks) products.push_back(f.mul(a, a));
    co_return co_await when_all(std::move(products));
  };
  auto results = run_parties(scheduler, network, [&](PartyId id) { return party(id); });
  for (PartyId id = 0; id < 3; ++id) {
    const CostCounters d = network.endpoint(id).costs() - before[id];
    CHECK(before[id].rounds == 0);
    CHECK(d.rounds == 1);
    CHECK(d.payload_bytes_sent() == 8 * elems);
    CHECK(d.messages_sent() == 8);
    CHECK(d.writes() == 1);  // eight messages, one batch to the previous party
  }
  for (std::size_t k = 0; k < 8; ++k) {
    RingTensor sum = ring_add(ring_add(results[0][k].own, results[1][k].own), results[2][k].own);
    CHECK(sum == ring_mul(x, x));
  }
}
