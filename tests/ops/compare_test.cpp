#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::share_of;
using mpcache::testing::random_ring;
using mpcache::testing::run_both;

namespace {
// Values spread over the whole signed range, plus the edges.
RingTensor edge_values() {
  RingTensor x = random_ring({300}, 81);
  const std::int64_t edges[] = {0, 1, -1, 2, -2, std::numeric_limits<std::int64_t>::max(),
                                std::numeric_limits<std::int64_t>::min(), 1 << 18, -(1 << 18)};
  for (std::size_t i = 0; i < std::size(edges); ++i) x(i) = static_cast<Ring>(edges[i]);
  return x;
}
}  // namespace

TEST_CASE("msb is the sign bit for every value, edges included") {
  const RingTensor x = edge_values();
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, x);
    co_return co_await p.reveal(co_await ops::msb(p, a));
  });
  for (std::size_t i = 0; i < x.size(); ++i) {
    const Ring want = static_cast<std::int64_t>(x(i)) < 0 ? 1 : 0;
    CHECK(secure.results[0](i) == want);
    CHECK(clear(i) == want);
  }
  CHECK(secure.results[1] == secure.results[0]);
}

TEST_CASE("a narrowed msb is the sign of every value within its range, edges included") {
  // Width 32: exact for |a| < 2^31; the low 32 bits of the shares are all it reads.
  RingTensor x = random_ring({300}, 85);
  for (std::size_t i = 0; i < x.size(); ++i) x(i) = static_cast<Ring>(static_cast<std::int64_t>(x(i)) >> 33);
  const std::int64_t edges[] = {0, 1, -1, (std::int64_t{1} << 31) - 1, -(std::int64_t{1} << 31) + 1};
  for (std::size_t i = 0; i < std::size(edges); ++i) x(i) = static_cast<Ring>(edges[i]);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, x);
    co_return co_await p.reveal(co_await ops::msb(p, a, 32));
  });
  for (std::size_t i = 0; i < x.size(); ++i) {
    const Ring want = static_cast<std::int64_t>(x(i)) < 0 ? 1 : 0;
    CHECK(secure.results[0](i) == want);
    CHECK(clear(i) == want);
  }
  // A value outside the range is misjudged: the width is a promise, not a check.
  const RingTensor outside = ring_filled({1}, Ring{1} << 31);
  auto [wrong, unused] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, outside);
    co_return co_await p.reveal(co_await ops::msb(p, a, 32));
  });
  (void)unused;
  CHECK(wrong.results[0](0) == 1);
}

TEST_CASE("less_than and select on fixed-point values, ties included") {
  FixedPoint fp;
  RealTensor xr = mpcache::testing::random_real({200}, -1000, 1000, 82);
  RealTensor yr = mpcache::testing::random_real({200}, -1000, 1000, 83);
  for (std::size_t i = 0; i < 20; ++i) yr(i) = xr(i);  // ties
  const RingTensor x = fp.encode(xr), y = fp.encode(yr);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 0, x);
    auto b = co_await share_of(p, 1, y);
    auto lt = co_await ops::less_than(p, a, b);
    auto smaller = co_await ops::select(p, lt, a, b);
    co_return std::array<RingTensor, 2>{co_await p.reveal(lt), co_await p.reveal(smaller)};
  });
  for (std::size_t i = 0; i < 200; ++i) {
    CHECK(secure.results[2][0](i) == (xr(i) < yr(i) ? 1u : 0u));
    CHECK(secure.results[2][1](i) == std::min(x(i), y(i), [](Ring u, Ring v) {
            return static_cast<std::int64_t>(u) < static_cast<std::int64_t>(v);
          }));
  }
  CHECK(secure.results[2] == clear);
}

TEST_CASE("short equality is exact for |a - b| below 2^width") {
  const std::size_t n = 256;
  RingTensor a = RingTensor::from_shape({n}), b = RingTensor::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) {
    a(i) = i % 64;
    b(i) = (i * 7 + (i % 3 == 0 ? 0 : 1)) % 64;
    if (i % 5 == 0) b(i) = a(i);
  }
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto x = co_await share_of(p, 0, a);
    auto y = co_await share_of(p, 1, b);
    co_return co_await p.reveal(co_await ops::equal(p, x, y, 7));
  });
  for (std::size_t i = 0; i < n; ++i) CHECK(secure.results[0](i) == (a(i) == b(i) ? 1u : 0u));
  CHECK(clear == secure.results[0]);
}

TEST_CASE("equality packs its AND tree at every width, a partial last word included") {
  // 37 elements: no field count divides them. Widths 1 (no tree), 3 and 7
  // (fields of 4 and 8 bits), 17 and 33 (16 and 64 bits: one to a word).
  const std::size_t n = 37;
  for (int width : {1, 3, 7, 17, 33}) {
    CAPTURE(width);
    const std::int64_t top = std::int64_t{1} << (width - 1);
    RingTensor a = RingTensor::from_shape({n}), b = RingTensor::from_shape({n});
    for (std::size_t i = 0; i < n; ++i) {
      a(i) = static_cast<Ring>(static_cast<std::int64_t>(i * 7919) % top);
      b(i) = i % 3 == 0 ? a(i) : a(i) - 1;  // |a - b| <= 1 < 2^width
    }
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
      auto x = co_await share_of(p, 0, a);
      auto y = co_await share_of(p, 1, b);
      co_return co_await p.reveal(co_await ops::equal(p, x, y, width));
    });
    for (std::size_t i = 0; i < n; ++i) CHECK(secure.results[0](i) == (a(i) == b(i) ? 1u : 0u));
    CHECK(clear == secure.results[0]);
  }
}

TEST_CASE("comparison and equality costs: rounds and bytes are exact") {
  const std::size_t n = 64;
  const RingTensor x = random_ring({n}, 84);
  const auto msb = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) {
    return ops::msb(p, a);
  });
  const auto zero = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) {
    return ops::is_zero(p, a, 7);
  });
  const auto narrow = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) {
    return ops::msb(p, a, 32);
  });
  // msb: msb_bits(64) = 6 rounds on packed planes; B2A = 2 rounds, 1 word.
  const Rss3MsbCost bits64 = rss3_msb_cost(64, n), bits32 = rss3_msb_cost(32, n);
  CHECK(bits64.rounds + Rss3Costs::bit_to_arith(n).rounds == 8);
  // msb over 32 bits: groups of 4, three tree levels, then B2A: the model's
  // 7. Measured 6: 64 elements have one lead, party 2, whose clock the
  // tree leaves behind party 1's, and B2A's chain runs 0 -> 1 -> 2.
  CHECK(bits32.rounds + Rss3Costs::bit_to_arith(n).rounds == 7);
  // is_zero(7): A2B(7) = 2 + 3 rounds, 1+1+2*3-1 = 7 words; AND tree 3
  // rounds on words packed 8 to a word (fields of 8 bits); B2A 2 rounds, 1 word.
  testing::check_pinned("ops.compare.rounds", std::vector<std::uint64_t>{msb.rounds, narrow.rounds, zero.rounds});
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(msb.bytes[id] == bits64.bytes[id] + n * 8);
    CHECK(narrow.bytes[id] == bits32.bytes[id] + n * 8);
    CHECK(zero.bytes[id] == (8 * n + 3 * ops::and_tree_words(n, 7)) * 8);
    CHECK(ops::and_tree_words(n, 7) == (n + 7) / 8);
  }
  // Packed: at most 5 words per element for the busiest party at 64 bits
  // (the A2B this replaces sent 13, B2A 2 more).
  CHECK(msb.bytes[0] + msb.bytes[1] + msb.bytes[2] <= 3 * 5 * n * 8);
}
