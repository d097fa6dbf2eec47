#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;
using mpcache::testing::measure_op;
using mpcache::testing::random_ring;
using mpcache::testing::random_real;
using mpcache::testing::run_rss3;

static_assert(Protocol<Rss3>);
static_assert(Protocol<Plain>);

namespace {
const Shape shapes[] = {Shape{1}, Shape{7}, Shape{3, 5}, Shape{2, 3, 4}};

// Every party passes the value only where it owns it.
std::optional<RingTensor> owned(const Rss3& p, PartyId owner, const RingTensor& v) {
  return p.holds_input(owner) ? std::optional<RingTensor>(v) : std::nullopt;
}

void check_within_one(const RingTensor& got, const RingTensor& floor_value) {
  REQUIRE(shape_of(got) == shape_of(floor_value));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Ring diff = got.data()[i] - floor_value.data()[i];
    CHECK((diff == 0 || diff == 1));
  }
}
}  // namespace

TEST_CASE("input from every owner, then reveal, gives the value back") {
  for (const Shape& shape : shapes) {
    for (PartyId owner = 0; owner < 3; ++owner) {
      const RingTensor x = random_ring(shape, 11 + owner);
      auto run = run_rss3([&](Rss3& p) -> Task<RingTensor> {
        auto s = co_await p.input(owner, owned(p, owner, x), shape);
        co_return co_await p.reveal(s);
      });
      for (const auto& r : run.results) CHECK(r == x);
    }
  }
}

TEST_CASE("no single party's pair of shares equals the secret") {
  const RingTensor x = random_ring({64}, 5);
  auto run = run_rss3([&](Rss3& p) -> Task<Rss3Share> {
    co_return co_await p.input(0, owned(p, 0, x), {64});
  });
  for (const auto& s : run.results) {
    CHECK(s.own != x);
    CHECK(s.next != x);
    CHECK(ring_add(s.own, s.next) != x);
  }
  // ... while the three parties' first components do sum to it.
  CHECK(ring_add(ring_add(run.results[0].own, run.results[1].own), run.results[2].own) == x);
  CHECK(run.results[0].next == run.results[1].own);  // replication: s_{i+1} twice
}

TEST_CASE("reveal_to gives the value to the receiver only") {
  const RingTensor x = random_ring({3, 3}, 8);
  for (PartyId receiver = 0; receiver < 3; ++receiver) {
    auto run = run_rss3([&](Rss3& p) -> Task<std::optional<RingTensor>> {
      auto s = co_await p.input(1, owned(p, 1, x), {3, 3});
      co_return co_await p.reveal_to(receiver, s);
    });
    for (PartyId id = 0; id < 3; ++id) {
      CHECK(run.results[id].has_value() == (id == receiver));
      if (id == receiver) CHECK(*run.results[id] == x);
    }
  }
}

TEST_CASE("local linear operations match clear-text ring arithmetic") {
  for (const Shape& shape : shapes) {
    const RingTensor x = random_ring(shape, 21), y = random_ring(shape, 22),
                     c = random_ring(shape, 23);
    auto run = run_rss3([&](Rss3& p) -> Task<std::vector<RingTensor>> {
      auto a = co_await p.input(0, owned(p, 0, x), shape);
      auto b = co_await p.input(2, owned(p, 2, y), shape);
      std::vector<RingTensor> out;
      out.push_back(co_await p.reveal(p.add(a, b)));
      out.push_back(co_await p.reveal(p.sub(a, b)));
      out.push_back(co_await p.reveal(p.neg(a)));
      out.push_back(co_await p.reveal(p.add_public(a, c)));
      out.push_back(co_await p.reveal(p.mul_public(a, c)));
      co_return out;
    });
    for (const auto& r : run.results) {
      CHECK(r[0] == ring_add(x, y));
      CHECK(r[1] == ring_sub(x, y));
      CHECK(r[2] == ring_neg(x));
      CHECK(r[3] == ring_add(x, c));
      CHECK(r[4] == ring_mul(x, c));
    }
  }
}

TEST_CASE("mul and matmul are exact in the ring") {
  for (const Shape& shape : shapes) {
    const RingTensor x = random_ring(shape, 31), y = random_ring(shape, 32);
    auto run = run_rss3([&](Rss3& p) -> Task<RingTensor> {
      auto a = co_await p.input(0, owned(p, 0, x), shape);
      auto b = co_await p.input(1, owned(p, 1, y), shape);
      co_return co_await p.reveal(co_await p.mul(a, b));
    });
    for (const auto& r : run.results) CHECK(r == ring_mul(x, y));
  }
  for (auto [m, k, n] : {std::array<std::size_t, 3>{1, 1, 1}, {3, 5, 2}, {1, 64, 17}, {4, 4, 4}}) {
    const RingTensor x = random_ring({m, k}, 33), y = random_ring({k, n}, 34),
                     w = random_ring({k, n}, 35);
    auto run = run_rss3([&](Rss3& p) -> Task<std::array<RingTensor, 2>> {
      auto a = co_await p.input(0, owned(p, 0, x), {m, k});
      auto b = co_await p.input(1, owned(p, 1, y), {k, n});
      auto ab = co_await p.reveal(co_await p.matmul(a, b));
      co_return std::array<RingTensor, 2>{ab, co_await p.reveal(p.matmul_public(a, w))};
    });
    for (const auto& r : run.results) {
      CHECK(r[0] == ring_matmul(x, y));
      CHECK(r[1] == ring_matmul(x, w));
    }
  }
}

TEST_CASE("truncation is floor(x / 2^d) or one more, for positive and negative x") {
  // |x| < 2^50: failure probability per element <= 2^-14; seeded, so exact.
  const Shape shape{4096};
  RingTensor x = random_ring(shape, 41);
  for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 14);
  for (int bits : {1, 18, 30}) {
    auto run = run_rss3(
        [&](Rss3& p) -> Task<RingTensor> {
          auto a = co_await p.input(2, owned(p, 2, x), shape);
          co_return co_await p.reveal(co_await p.truncate(a, bits));
        },
        Rss3Options{.insecure_seed = 7});
    for (const auto& r : run.results) check_within_one(r, ring_shift_floor(x, bits));
  }
}

TEST_CASE("fused mul_trunc and matmul_trunc compute fixed-point products") {
  FixedPoint fp;
  const RealTensor xr = random_real({256}, -30.0, 30.0, 51),
                           yr = random_real({256}, -30.0, 30.0, 52);
  const RingTensor x = fp.encode(xr), y = fp.encode(yr);
  auto run = run_rss3([&](Rss3& p) -> Task<RingTensor> {
    auto a = co_await p.input(0, owned(p, 0, x), {256});
    auto b = co_await p.input(1, owned(p, 1, y), {256});
    co_return co_await p.reveal(co_await p.mul_trunc(a, b));
  });
  check_within_one(run.results[0], ring_shift_floor(ring_mul(x, y), 18));
  RealTensor got = fp.decode(run.results[0]);
  for (std::size_t i = 0; i < 256; ++i) {
    // input rounding (2 x 2^-19 x 30) + truncation (2^-18)
    CHECK(std::fabs(got(i) - xr(i) * yr(i)) <= 30 * 0x1p-18 + 0x1p-18 + 1e-12);
  }

  const RealTensor mr = random_real({2, 64}, -1.0, 1.0, 53),
                           wr = random_real({64, 8}, -1.0, 1.0, 54);
  const RingTensor m = fp.encode(mr), w = fp.encode(wr);
  auto run2 = run_rss3([&](Rss3& p) -> Task<RingTensor> {
    auto a = co_await p.input(0, owned(p, 0, m), {2, 64});
    auto b = co_await p.input(1, owned(p, 1, w), {64, 8});
    co_return co_await p.reveal(co_await p.matmul_trunc(a, b));
  });
  check_within_one(run2.results[2], ring_shift_floor(ring_matmul(m, w), 18));
  RealTensor prod = fp.decode(run2.results[2]);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 8; ++j) {
      double want = 0;
      for (std::size_t k = 0; k < 64; ++k) want += mr(i, k) * wr(k, j);
      CHECK(std::fabs(prod(i, j) - want) <= 64 * 0x1p-18 + 0x1p-18);
    }
}

TEST_CASE("truncation failures follow the stated bound 2^(l-64)") {
  // Failure rate is (|x|+1)/2^64 per element: none expected at |x| < 2^40
  // (65536 elements x 2^-24), 1 in 16 on average for |x| uniform below 2^61. Seeded, so exact.
  const Shape shape{65536};
  RingTensor ones = ring_zeros(shape);
  std::fill(ones.begin(), ones.end(), Ring{1});
  for (int magnitude : {40, 61}) {
    RingTensor x = random_ring(shape, 61);
    for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> (63 - magnitude));
    auto run = run_rss3(
        [&](Rss3& p) -> Task<RingTensor> {
          auto a = co_await p.input(0, owned(p, 0, x), shape);
          // x * (ring) 1 = x: the fused path truncates a fresh 3-out-of-3 sharing of x.
          auto one = co_await p.input(1, owned(p, 1, ones), shape);
          co_return co_await p.reveal(co_await p.mul_trunc(a, one));
        },
        Rss3Options{.exact_truncation = false, .insecure_seed = 3});
    const RingTensor want = ring_shift_floor(x, 18);
    std::size_t failures = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const Ring diff = run.results[0].data()[i] - want.data()[i];
      failures += !(diff == 0 || diff == 1);
    }
    if (magnitude == 40) CHECK(failures == 0);
    if (magnitude == 61) {
      // |x| uniform below 2^61: expectation 65536 * E|x| / 2^64 = 4096.
      CHECK(failures > 2048);
      CHECK(failures < 8192);
    }
  }
}

TEST_CASE("exact truncation corrects every wrap, where the probabilistic one fails 1 in 16") {
  // The same values as above at 2^61, where one round of probabilistic
  // truncation fails about 4,096 times in 65,536, plus the edges of the
  // exact range (|x| < 2^62): both paths, the fused product and truncate.
  const Shape shape{65536};
  RingTensor ones = ring_zeros(shape);
  std::fill(ones.begin(), ones.end(), Ring{1});
  RingTensor x = random_ring(shape, 61);
  for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 2);
  const std::int64_t edge = (std::int64_t{1} << 62) - 1;
  for (std::size_t i = 0; i < 64; ++i) x.data()[i] = static_cast<Ring>(i % 2 ? edge - std::int64_t(i) : -edge + std::int64_t(i));
  const Rss3Options exact{.exact_truncation = true, .insecure_seed = 3};
  for (int bits : {1, 18, 40, 63}) {
    auto run = run_rss3(
        [&](Rss3& p) -> Task<std::array<RingTensor, 2>> {
          auto a = co_await p.input(0, owned(p, 0, x), shape);
          auto one = co_await p.input(1, owned(p, 1, ones), shape);
          auto fused = co_await p.reveal(co_await p.mul_trunc(a, one, bits));
          auto alone = co_await p.reveal(co_await p.truncate(co_await p.mul(a, one), bits));
          co_return std::array{fused, alone};
        },
        exact);
    const RingTensor want = ring_shift_floor(x, bits);
    for (const auto& r : run.results) {
      check_within_one(r[0], want);
      check_within_one(r[1], want);
    }
  }
}

TEST_CASE("exact truncation: 2 rounds after a product, 1 alone; the wrap's parts travel as ceil(d/8) bytes per element") {
  const std::size_t n = 1000;
  const RingTensor x = random_ring({n}, 9);
  const Rss3Options exact{.exact_truncation = true, .insecure_seed = 1};
  auto fused = measure_op(x, [](Rss3& p, const Rss3Share& a) { return p.mul_trunc(a, a); }, exact);
  // d = 18: 3 bytes per part. Party 0: its half (8) and its offer (3);
  // parties 1 and 2: their term (8) and their part of the wrap (3).
  CHECK(fused.rounds == 2);
  CHECK(fused.bytes == std::array<std::uint64_t, 3>{11 * n, 11 * n, 11 * n});
  // After a product (1 round, n each), so that no party starts behind.
  auto product_then_truncate = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await p.truncate(co_await p.mul(a, a), 18);
  };
  // Alone, parties 1 and 2 hold b from the start, so the wrap's parts take
  // one round: party 0 sends y0 (8) and a word to each (2 x 3), parties 1
  // and 2 one word each (3).
  auto alone = measure_op(x, product_then_truncate, exact);
  CHECK(alone.rounds == 1 + 1);
  CHECK(alone.bytes == std::array<std::uint64_t, 3>{(8 + 8 + 6) * n, (8 + 3) * n, (8 + 3) * n});
  auto alone_narrow = measure_op(
      x, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> { co_return co_await p.truncate(co_await p.mul(a, a), 3); },
      exact);
  CHECK(alone_narrow.rounds == 1 + 1);
  CHECK(alone_narrow.bytes == std::array<std::uint64_t, 3>{(8 + 8 + 2) * n, (8 + 1) * n, (8 + 1) * n});
  auto wide = measure_op(x, [](Rss3& p, const Rss3Share& a) { return p.mul_trunc(a, a, 40); }, exact);
  CHECK(wide.bytes == std::array<std::uint64_t, 3>{(8 + 5) * n, (8 + 5) * n, (8 + 5) * n});
  // Probabilistic: one round, every party n (fused); party 0 alone n.
  auto fast = measure_op(x, [](Rss3& p, const Rss3Share& a) { return p.mul_trunc(a, a); });
  CHECK(fast.rounds == 1);
  CHECK(fast.bytes == std::array<std::uint64_t, 3>{n * 8, n * 8, n * 8});
}

TEST_CASE("dot_trunc: sums of products over the last axis, truncated, at one product's round and bytes") {
  // Values below 2^20 in magnitude, so that sums of products stay far
  // inside truncation's range (|x| < 2^62 with overwhelming probability).
  auto small = [](std::uint64_t seed) {
    RingTensor t = random_ring({3, 4, 5}, seed);
    for (auto& e : t) e = static_cast<Ring>(static_cast<std::int64_t>(e) >> 44);
    return t;
  };
  const RingTensor a = small(61), b = small(62);
  auto run = run_rss3([&](Rss3& p) -> Task<std::vector<RingTensor>> {
    auto x = co_await p.input(0, owned(p, 0, a), {3, 4, 5});
    auto y = co_await p.input(1, owned(p, 1, b), {3, 4, 5});
    std::vector<RingTensor> out;
    out.push_back(co_await p.reveal(co_await p.dot_trunc(x, y)));
    out.push_back(co_await p.reveal(co_await p.dot_trunc(x, y, 20)));
    co_return out;
  });
  const RingTensor dot = ring_weighted_sum_last(ring_mul(a, b), std::vector<Ring>(5, Ring{1}));
  CHECK(shape_of(run.results[0][0]) == Shape{3, 4});
  CHECK(run.results[0][0] == dot);
  check_within_one(run.results[1][1], ring_shift_floor(dot, 20));
  // One round; every party sends one word per output (k = 5 inputs each).
  const std::size_t n = 200;
  const RingTensor x = random_ring({n, 5}, 63);
  auto cost = measure_op(x, [](Rss3& p, const Rss3Share& s) { return p.dot_trunc(s, s, 18); });
  CHECK(cost.rounds == 1);
  CHECK(cost.bytes == std::array<std::uint64_t, 3>{8 * n, 8 * n, 8 * n});
  auto error = run_rss3([](Rss3& p) -> Task<std::string> {
    try {
      (void)co_await p.dot_trunc(Rss3Share{RingTensor::from_shape({2, 0}), RingTensor::from_shape({2, 0})},
                                 Rss3Share{RingTensor::from_shape({2, 0}), RingTensor::from_shape({2, 0})});
    } catch (const Error& e) {
      co_return std::string(e.what());
    }
    co_return std::string();
  });
  for (const auto& r : error.results) CHECK(r.find("rss3 dot_trunc over an empty last axis") != std::string::npos);
}
