// rss3 truncation pairs (src/proto/rss3_pairs.cpp): an exact fused product
// in one round from pairs made ahead, party 0's grants per stream, the
// reservations per call a refill makes, and the two-round path wherever a
// stream holds too few.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;
using mpcache::testing::random_ring;
using mpcache::testing::share_of;

namespace {

constexpr std::uint64_t megabyte = std::uint64_t{1} << 20;

Rss3Options with_pairs(int frac_bits = default_frac_bits, std::uint64_t budget = 64 * megabyte) {
  return {.frac_bits = frac_bits, .exact_truncation = true, .insecure_seed = 5, .truncation_pairs_budget = budget};
}

// |got - x / 2^d| <= 2 for every element, as signed values.
void check_within_two(const RingTensor& got, const RingTensor& x, int d) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double want = static_cast<long double>(static_cast<std::int64_t>(x(i))) / std::ldexp(1.0L, d);
    const long double err = static_cast<long double>(static_cast<std::int64_t>(got(i))) - want;
    INFO("d " << d << ", element " << i << ", x " << static_cast<std::int64_t>(x(i)) << ", got "
              << static_cast<std::int64_t>(got(i)));
    REQUIRE(std::abs(static_cast<double>(err)) <= 2.0);
  }
}

struct Measured {
  std::array<RingTensor, 3> first, second, third;  // revealed results of three calls on one stream
  OpCost second_cost;
  std::array<Rss3TruncationStats, 3> stats;
};

// x times ones (ring 1), fused and truncated by frac_bits: x / 2^d, three
// times on one stream after `prepare` pairs were made; the second measured.
Measured three_products(const RingTensor& x, Rss3Options options, std::size_t prepare) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  RingTensor ones = ring_zeros(shape_of(x));
  std::fill(ones.begin(), ones.end(), Ring{1});
  std::array<CostCounters, 3> before, after;
  Measured out;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), options);
    Rss3 p = party->session();
    auto a = co_await share_of(p, 0, x);
    auto one = co_await share_of(p, 1, ones);
    (void)co_await party->prepare_truncations(options.frac_bits, prepare);
    out.first[id] = co_await p.reveal(co_await p.mul_trunc(a, one));
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    const Rss3Share second = co_await p.mul_trunc(a, one);
    after[id] = network.endpoint(id).costs();
    out.second[id] = co_await p.reveal(second);
    out.third[id] = co_await p.reveal(co_await p.mul_trunc(a, one));
    out.stats[id] = party->truncation_stats();
  });
  for (std::size_t i = 0; i < 3; ++i) out.second_cost.bytes[i] = (after[i] - before[i]).payload_bytes_sent();
  out.second_cost.rounds = mpcache::testing::critical_rounds(before, after);
  return out;
}

}  // namespace

TEST_CASE("truncation pairs: an exact fused product in one round, within 2 of x / 2^d, wraps included") {
  // Values up to 2^61 and the edges of the range the pairs allow
  // (|x| < 2^62 - 3 2^d), at three fraction widths.
  const std::size_t n = 4096;
  for (int d : {8, 18, 30}) {
    RingTensor x = random_ring({n}, 61);
    for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 2);
    const std::int64_t edge = (std::int64_t{1} << 62) - 3 * (std::int64_t{1} << d) - 1;
    for (std::size_t i = 0; i < 64; ++i)
      x.data()[i] = static_cast<Ring>(i % 2 ? edge - std::int64_t(i) : -edge + std::int64_t(i));
    for (std::size_t i = 64; i < 80; ++i) x.data()[i] = static_cast<Ring>(std::int64_t(i) - 72);  // around 0
    const Measured m = three_products(x, with_pairs(d), 3 * n);
    for (std::size_t id = 0; id < 3; ++id) {
      check_within_two(m.first[id], x, d);  // the two-round path (within 1)
      check_within_two(m.second[id], x, d);
      check_within_two(m.third[id], x, d);
    }
    // The first call found no grant (two rounds) and got 2n; the second and
    // third used it, and the third asked for more.
    CHECK(m.stats[0].two_round == n);
    CHECK(m.stats[0].from_pairs == 2 * n);
    CHECK(m.stats[0].granted == 3 * n);  // 2n, then the n the store had left
    CHECK(m.stats[1].from_pairs == 2 * n);
    CHECK(m.stats[0].prepared == 3 * n);
  }
}

TEST_CASE("truncation pairs: one round; every party sends the bytes of bits d-2..63 to both others, party 0 a header") {
  const std::size_t n = 1000;
  const RingTensor x = random_ring({n}, 50);
  const Measured m = three_products(x, with_pairs(), 3 * n);
  CHECK(m.second_cost.rounds == 1);
  // d = 18: bits 16..63 fit in 6 bytes; party 0 adds its header (24 bytes) to each.
  CHECK(m.second_cost.bytes == std::array<std::uint64_t, 3>{2 * 6 * n + 48, 2 * 6 * n, 2 * 6 * n});
  const Measured wide = three_products(x, with_pairs(30), 3 * n);  // bits 28..63: 5 bytes
  CHECK(wide.second_cost.bytes == std::array<std::uint64_t, 3>{2 * 5 * n + 48, 2 * 5 * n, 2 * 5 * n});
  const Measured narrow = three_products(x, with_pairs(8), 3 * n);  // bits 6..63: all 8 bytes
  CHECK(narrow.second_cost.bytes == std::array<std::uint64_t, 3>{2 * 8 * n + 48, 2 * 8 * n, 2 * 8 * n});
}

TEST_CASE("truncation pairs: a dry store, new streams and a refill fall back to two rounds; concurrent forks agree") {
  // Three forks run chains of products of different sizes at once, so their
  // calls reach the parties in different orders; party 0's grants keep
  // every party on the same pairs. The store holds less than they need.
  const std::array<std::size_t, 3> sizes{300, 500, 700};
  std::array<RingTensor, 3> xs;
  for (std::size_t k = 0; k < 3; ++k) {  // |x| < 2^40, so that x 2^18 stays in range
    xs[k] = random_ring({sizes[k]}, 40 + k);
    for (auto& v : xs[k]) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 24);
  }
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<std::array<RingTensor, 3>, 3> revealed;  // [party][fork]
  std::array<Rss3TruncationStats, 3> stats, after_refill;
  std::array<CostCounters, 3> before_refilled, after_refilled;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), with_pairs());
    Rss3 p = party->session();
    std::vector<Rss3Share> values;
    for (std::size_t k = 0; k < 3; ++k) values.push_back(co_await share_of(p, static_cast<PartyId>(k), xs[k]));
    (void)co_await party->prepare_truncations(default_frac_bits, 4000);
    RingTensor ones_0 = ring_zeros({sizes[0]});
    std::fill(ones_0.begin(), ones_0.end(), Ring{1} << default_frac_bits);
    const Rss3Share one_0 = p.add_public(p.sub(values[0], values[0]), ones_0);
    (void)co_await p.mul_trunc(values[0], one_0);  // the session's first call: two rounds, a grant of 600
    auto chain = [&](Rss3 q, std::size_t k) -> Task<RingTensor> {
      Rss3Share v = values[k];
      RingTensor ones = ring_zeros({sizes[k]});
      std::fill(ones.begin(), ones.end(), Ring{1} << default_frac_bits);
      const Rss3Share one = q.add_public(q.sub(v, v), ones);  // a public 1.0 as a sharing
      for (int step = 0; step < 6; ++step) v = co_await q.mul_trunc(v, one);
      co_return co_await q.reveal(v);
    };
    auto [a, b, c] = co_await when_all(chain(p.fork(), 0), chain(p.fork(), 1), chain(p.fork(), 2));
    revealed[id] = {a, b, c};
    stats[id] = party->truncation_stats();
    // A refill ends every grant: a stream that had one takes two rounds again.
    (void)co_await party->prepare_truncations(default_frac_bits, 4000);
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before_refilled[id] = network.endpoint(id).costs();
    (void)co_await p.mul_trunc(values[0], one_0);
    after_refilled[id] = network.endpoint(id).costs();
    after_refill[id] = party->truncation_stats();
  });
  for (std::size_t id = 0; id < 3; ++id)
    for (std::size_t k = 0; k < 3; ++k) {
      INFO("party " << id << ", fork " << k);
      for (std::size_t i = 0; i < sizes[k]; ++i) REQUIRE(std::abs(static_cast<std::int64_t>(revealed[id][k](i) - xs[k](i))) <= 12);
    }
  // The session's call, then 6 per fork: the first of each takes two rounds
  // (1,800 elements), and the 4,000 pairs run out before the rest.
  const std::uint64_t total = 6 * (300 + 500 + 700) + 300;
  for (std::size_t id = 0; id < 3; ++id) {
    CHECK(stats[id].from_pairs + stats[id].two_round == total);
    CHECK(stats[id].from_pairs > 0);
    CHECK(stats[id].two_round > 300 + 300 + 500 + 700);
    CHECK(stats[id].from_pairs == stats[0].from_pairs);  // every party used the same pairs
  }
  CHECK(stats[0].ran_dry > 0);
  CHECK(stats[0].granted <= 4000);
  CHECK(mpcache::testing::critical_rounds(before_refilled, after_refilled) == 2);
  CHECK(after_refill[0].two_round == stats[0].two_round + 300);
}

TEST_CASE("truncation pairs: a stream that took the store hands half to each fork; forks' first products take one round") {
  // The session takes the store; two forks, created together, get a half
  // and a quarter; their first products run at once in one round, and what
  // they leave comes back to the session when they end.
  const std::size_t n = 256;
  RingTensor x = random_ring({n}, 77);
  for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 24);
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  std::array<std::array<RingTensor, 2>, 3> revealed;
  std::array<Rss3TruncationStats, 3> stats;
  std::array<std::size_t, 3> after_forks{};
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), with_pairs());
    Rss3 p = party->session();
    const Rss3Share a = co_await share_of(p, 2, x);
    RingTensor ones = ring_zeros({n});
    std::fill(ones.begin(), ones.end(), Ring{1} << default_frac_bits);
    const Rss3Share one = p.add_public(p.sub(a, a), ones);
    (void)co_await party->prepare_truncations(default_frac_bits, 8 * n);
    p.take_truncation_pairs();
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    {
      Rss3 f = p.fork(), g = p.fork();  // 4n and 2n of the 8n pairs
      auto [u, v] = co_await when_all(f.mul_trunc(a, one), g.mul_trunc(a, one));
      after[id] = network.endpoint(id).costs();
      revealed[id] = {co_await p.reveal(u), co_await p.reveal(v)};
    }
    // The forks ended: the session holds 8n - 2n again, and uses it.
    (void)co_await p.mul_trunc(a, one);
    stats[id] = party->truncation_stats();
    after_forks[id] = party->truncation_stats().two_round;
  });
  CHECK(mpcache::testing::critical_rounds(before, after) == 1);
  for (std::size_t id = 0; id < 3; ++id) {
    for (const RingTensor& r : revealed[id])
      for (std::size_t i = 0; i < n; ++i) REQUIRE(std::abs(static_cast<std::int64_t>(r(i) - x(i))) <= 2);
    CHECK(stats[id].from_pairs == 3 * n);
    CHECK(after_forks[id] == 0);
  }
  CHECK(stats[0].granted == 0);  // held pairs sufficed: party 0 granted nothing more
}

TEST_CASE("truncation pairs: a refill makes 16 times the demand since the last one, over `steps`, at least 2^16") {
  // 2^18 elements truncated once (a prefill of 8 tokens, say): a refill
  // over 8 steps makes 16 x 2^15 pairs, over 64 steps the floor of 2^16.
  const std::size_t n = std::size_t{1} << 18;
  RingTensor x = random_ring({n}, 52);
  for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 24);
  for (const auto& [steps, made] : {std::pair<std::size_t, std::uint64_t>{8, 16 << 15}, {64, 1 << 16}}) {
    CAPTURE(steps);
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    std::array<std::uint64_t, 3> prepared{};
    run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
      auto party = co_await Rss3Party::setup(network.endpoint(id), with_pairs(default_frac_bits, 256 * megabyte));
      Rss3 p = party->session();
      const Rss3Share a = co_await share_of(p, 0, x);
      (void)co_await p.truncate(p.add(a, a), default_frac_bits);  // a truncation alone: no demand for pairs
      RingTensor ones = ring_zeros({n});
      std::fill(ones.begin(), ones.end(), Ring{1} << default_frac_bits);
      (void)co_await p.mul_trunc(a, p.add_public(p.sub(a, a), ones));
      CHECK(co_await p.refill_truncation_pairs(16, steps));
      prepared[id] = party->truncation_stats().prepared;
    });
    for (std::size_t id = 0; id < 3; ++id) CHECK(prepared[id] == made);
  }
}

TEST_CASE("truncation pairs: a refill reserves pairs for each call of the last step, so deep forks take one round") {
  // A "step": four forks at once, fork k making a product of 100 (k + 1)
  // elements, then one in a fork of its own, then one more: three rounds
  // with pairs, six without. Step 0 follows a refill with nothing to learn
  // from: every call takes two rounds (and is recorded). The refill after
  // it reserves each call's count + a quarter + 16, and steps 1 and 2 take
  // one round per call; after step 1 only what step 1 used is made again
  // (the slack it left is kept).
  const std::array<std::size_t, 4> sizes{100, 200, 300, 400};
  std::array<RingTensor, 4> xs;
  for (std::size_t k = 0; k < 4; ++k) {
    xs[k] = random_ring({sizes[k]}, 90 + k);
    for (auto& v : xs[k]) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 24);
  }
  constexpr std::size_t steps = 3;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<std::array<CostCounters, 3>, steps> before, after;  // by step, then party
  std::array<std::array<Rss3TruncationStats, steps + 1>, 3> stats;  // before each step, and at the end
  std::array<std::array<RingTensor, 4>, 3> revealed;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), with_pairs());
    Rss3 p = party->session();
    std::vector<Rss3Share> as, ones;
    for (std::size_t k = 0; k < 4; ++k) {
      as.push_back(co_await share_of(p, 2, xs[k]));
      RingTensor one = ring_zeros({sizes[k]});
      std::fill(one.begin(), one.end(), Ring{1} << default_frac_bits);
      ones.push_back(p.add_public(p.sub(as[k], as[k]), one));
    }
    auto chain = [&](Rss3& q, std::size_t k) -> Task<Rss3Share> {
      auto y = co_await q.mul_trunc(as[k], ones[k]);
      Rss3 deeper = q.fork();
      y = co_await deeper.mul_trunc(y, ones[k]);
      co_return co_await q.mul_trunc(y, ones[k]);
    };
    for (std::size_t s = 0; s < steps; ++s) {
      CHECK(co_await p.refill_truncation_pairs(1));
      stats[id][s] = party->truncation_stats();
      co_await mpcache::testing::align_clocks(network.endpoint(id));
      before[s][id] = network.endpoint(id).costs();
      Rss3 f0 = p.fork(), f1 = p.fork(), f2 = p.fork(), f3 = p.fork();
      auto [y0, y1, y2, y3] = co_await when_all(chain(f0, 0), chain(f1, 1), chain(f2, 2), chain(f3, 3));
      after[s][id] = network.endpoint(id).costs();
      if (s + 1 == steps) revealed[id] = {co_await p.reveal(y0), co_await p.reveal(y1), co_await p.reveal(y2),
                                          co_await p.reveal(y3)};
    }
    stats[id][steps] = party->truncation_stats();
  });
  const std::uint64_t per_step = 3 * (100 + 200 + 300 + 400);
  std::uint64_t reserved = 0;
  for (std::size_t n : sizes) reserved += 3 * Rss3TruncationPlan::with_slack(n);
  for (std::size_t id = 0; id < 3; ++id) {
    CAPTURE(id);
    for (std::size_t k = 0; k < 4; ++k)  // x times 1, three times: within 2 each
      for (std::size_t i = 0; i < sizes[k]; ++i)
        REQUIRE(std::abs(static_cast<std::int64_t>(revealed[id][k](i) - xs[k](i))) <= 6);
    CHECK(stats[id][1].two_round - stats[id][0].two_round == per_step);
    for (std::size_t s = 1; s < steps; ++s) {
      CAPTURE(s);
      CHECK(stats[id][s + 1].two_round == stats[id][s].two_round);
      CHECK(stats[id][s + 1].planned - stats[id][s].planned == per_step);
    }
    CHECK(stats[id][1].prepared - stats[id][0].prepared == reserved);
    CHECK(stats[id][2].prepared - stats[id][1].prepared == per_step);
  }
  CHECK(mpcache::testing::critical_rounds(before[0], after[0]) == 6);
  CHECK(mpcache::testing::critical_rounds(before[1], after[1]) == 3);
  CHECK(mpcache::testing::critical_rounds(before[2], after[2]) == 3);
}

TEST_CASE("truncation pairs: prepare_truncations refuses without exact truncation or a budget; set-up names a differing budget") {
  auto message = [](Rss3Options options) {
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
      auto party = co_await Rss3Party::setup(network.endpoint(id), options);
      try {
        (void)co_await party->prepare_truncations(18, 10);
      } catch (const Error& e) {
        co_return e.what();
      }
      co_return "";
    });
    return results[0];
  };
  CHECK(message({.exact_truncation = false, .insecure_seed = 1, .truncation_pairs_budget = megabyte}).find("truncation is not exact") !=
        std::string::npos);
  CHECK(message({.exact_truncation = true, .insecure_seed = 1}).find("truncation_pairs_budget is 0") !=
        std::string::npos);
  auto shift_message = [](int bits) {
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    return run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
      auto party = co_await Rss3Party::setup(network.endpoint(id), with_pairs());
      try {
        (void)co_await party->prepare_truncations(bits, 10);
      } catch (const Error& e) {
        co_return e.what();
      }
      co_return "";
    })[0];
  };
  CHECK(shift_message(61).find("a shift of 61 bits is outside [1, 60]") != std::string::npos);
  CHECK(shift_message(0).find("a shift of 0 bits is outside [1, 60]") != std::string::npos);

  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto refusals = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
    try {
      (void)co_await Rss3Party::setup(network.endpoint(id),
                                      {.exact_truncation = true, .truncation_pairs_budget = id == 0 ? 4096u : 0u});
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  CHECK(refusals[1].find("party 1: party 0 uses 18 fraction bits, exact truncation, circuit comparisons, truncation "
                         "pairs of 4096 bytes, this party 18 fraction bits, exact truncation, circuit comparisons, "
                         "truncation pairs of 0 bytes") != std::string::npos);
  CHECK(refusals[2] == "");
}
