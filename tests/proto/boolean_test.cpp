#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::share_of;
using mpcache::testing::random_ring;
using mpcache::testing::run_plain;
using mpcache::testing::run_rss3;

namespace {
RingTensor masked(RingTensor v, int width) {
  const Ring mask = width >= 64 ? ~Ring{0} : (Ring{1} << width) - 1;
  for (auto& x : v) x &= mask;
  return v;
}

std::uint64_t ceil_log2(int w) {
  std::uint64_t l = 0;
  while ((1 << l) < w) ++l;
  return l;
}
}  // namespace

TEST_CASE("A2B gives the value's bits for every width, on rss3 and plain") {
  const RingTensor x = random_ring({2, 50}, 71);
  for (int width : {1, 2, 3, 7, 8, 33, 63, 64}) {
    auto run = run_rss3([&](Rss3& p) -> Task<RingTensor> {
      auto a = co_await share_of(p, 1, x);
      co_return co_await p.reveal_bits(co_await p.to_bits(a, width));
    });
    for (const auto& r : run.results) CHECK(r == masked(x, width));
    RingTensor plain = run_plain([&](Plain& p) -> Task<RingTensor> {
      auto a = co_await share_of(p, 1, x);
      co_return co_await p.reveal_bits(co_await p.to_bits(a, width));
    });
    CHECK(plain == masked(x, width));
  }
}

TEST_CASE("A2B and AND cost exactly what the adder needs") {
  const std::size_t n = 100;
  const RingTensor x = random_ring({n}, 72);
  for (int width : {2, 7, 64}) {
    const auto cost = mpcache::testing::measure_op(x, [width](Rss3& p, const Rss3Share& a) {
      return p.to_bits(a, width);
    });
    const std::uint64_t levels = ceil_log2(width);
    const std::uint64_t words = 2 + 2 * levels - 1;  // maj, G, two gates per level but the last
    for (auto bytes : cost.bytes) CHECK(bytes == words * n * 8);
    CHECK(cost.rounds == 2 + levels);
  }
}

TEST_CASE("AND, XOR, shifts and public masks match clear-text bit operations") {
  const RingTensor x = random_ring({64}, 73), y = random_ring({64}, 74), c = random_ring({64}, 75);
  auto run = run_rss3([&](Rss3& p) -> Task<std::vector<RingTensor>> {
    auto a = co_await p.to_bits(co_await share_of(p, 0, x), 64);
    auto b = co_await p.to_bits(co_await share_of(p, 2, y), 64);
    std::vector<RingTensor> out;
    out.push_back(co_await p.reveal_bits(co_await p.bits_and(a, b)));
    out.push_back(co_await p.reveal_bits(p.bits_xor(a, b)));
    out.push_back(co_await p.reveal_bits(p.bits_xor_public(a, c)));
    out.push_back(co_await p.reveal_bits(p.bits_and_public(a, c)));
    out.push_back(co_await p.reveal_bits(p.bits_shift_left(a, 5)));
    out.push_back(co_await p.reveal_bits(p.bits_shift_right(a, 63)));
    co_return out;
  });
  for (const auto& r : run.results) {
    CHECK(r[0] == ring_and(x, y));
    CHECK(r[1] == ring_xor(x, y));
    CHECK(r[2] == ring_xor(x, c));
    CHECK(r[3] == ring_and(x, c));
    CHECK(r[4] == ring_shift_left(x, 5));
    CHECK(r[5] == ring_shift_right_logical(x, 63));
  }
}

TEST_CASE("msb_bits gives bit w-1 of every value, for every width, group size and chunking") {
  RingTensor x = random_ring({300}, 79);
  // Edges: 0, -1, and values around each width's sign boundary.
  x(0) = 0;
  x(1) = ~Ring{0};
  for (std::size_t i = 2; i < 66; ++i) x(i) = (Ring{1} << (i - 2)) - (i % 2);
  for (std::size_t n : {std::size_t{1}, std::size_t{64}, std::size_t{129}, std::size_t{300}}) {
    RingTensor xs = ring_slice_last(x, 0, n);
    for (int width : {2, 3, 5, 17, 27, 33, 34, 63, 64})
      for (int group : {0, 1, 2, 3, 4, 5, 6}) {
        auto run = run_rss3([&](Rss3& p) -> Task<RingTensor> {
          auto a = co_await share_of(p, (width + group) % 3, xs);
          co_return co_await p.reveal_bits(co_await p.msb_bits(a, width, group));
        });
        RingTensor want = ring_shift_right_logical(xs, width - 1);
        for (auto& v : want) v &= 1;
        for (const auto& r : run.results) CHECK_MESSAGE(r == want, "n " << n << " width " << width << " group " << group);
      }
  }
}

TEST_CASE("msb_bits rejects widths and group sizes out of range") {
  const RingTensor x = random_ring({4}, 80);
  for (auto [width, group] : {std::pair{1, 0}, std::pair{65, 0}, std::pair{32, 7}, std::pair{32, -1}}) {
    CHECK_THROWS_AS(run_rss3([&](Rss3& p) -> Task<RingTensor> {
                      auto a = co_await share_of(p, 0, x);
                      co_return co_await p.reveal_bits(co_await p.msb_bits(a, width, group));
                    }),
                    Error);
    CHECK_THROWS_AS(rss3_msb_cost(width, 4, group), Error);
  }
}

TEST_CASE("msb_bits costs exactly what rss3_msb_cost says: packed planes, fewest rounds") {
  for (std::size_t n : {std::size_t{5}, std::size_t{192}, std::size_t{1000}, std::size_t{4608}})
    for (int width : {2, 9, 23, 27, 34, 42, 64}) {
      const RingTensor x = random_ring({n}, 81);
      const auto cost = mpcache::testing::measure_op(x, [width](Rss3& p, const Rss3Share& a) {
        return p.msb_bits(a, width);
      });
      const Rss3MsbCost model = rss3_msb_cost(width, n);
      CHECK(cost.rounds == model.rounds);
      CHECK(cost.bytes == model.bytes);
    }
  // Pinned: 4608 elements = 72 words, 24 per party's third (from 24 words
  // on, each party leads a third). w = 64 groups of 4: the lead sends 15
  // planes per group (16 groups, the last of 3 bits: 7) + the top bit =
  // 233, the others reshare 2 x 16 = 32; the tree's ANDs 15 + 7 + 3 + 1 =
  // 26 planes; each party leads once and follows twice.
  const Rss3MsbCost wide = rss3_msb_cost(64, 4608), narrow = rss3_msb_cost(27, 4608);
  CHECK(wide.group == 4);
  testing::check_pinned("proto.rss3.msb_4608_w64.rounds", wide.rounds);
  for (auto bytes : wide.bytes) CHECK(bytes == (233 + 26 + 2 * (32 + 26)) * 24 * 8);
  // w = 27: 26 low bits in 6 groups of 4 and one of 2: 90 + 3 + 1 = 94
  // planes from the lead, 14 reshared, ANDs 5 + 3 + 1.
  CHECK(narrow.group == 4);
  CHECK(narrow.rounds == 5);
  for (auto bytes : narrow.bytes) CHECK(bytes == (94 + 9 + 2 * (14 + 9)) * 24 * 8);
  // Fewer words: one lead (party 2 in a fresh call; later calls rotate).
  const Rss3MsbCost small = rss3_msb_cost(64, 192);
  CHECK(small.bytes == std::array<std::uint64_t, 3>{(32 + 26) * 3 * 8, (32 + 26) * 3 * 8, (233 + 26) * 3 * 8});
}

TEST_CASE("B2A sends one word per element and party, in two rounds") {
  const std::size_t n = 100;
  const RingTensor x = random_ring({n}, 82);
  // Party 0's message starts the chain; party 2's goes out at once.
  const auto cost = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    const Rss3Bits bits{a.own, a.next};
    co_return co_await p.bit_to_arith(bits);
  });
  CHECK(cost.rounds == 2);
  for (auto bytes : cost.bytes) CHECK(bytes == n * 8);
}

TEST_CASE("B2A turns bit 0 into an arithmetic 0 or 1 in two rounds") {
  const RingTensor x = random_ring({200}, 76);
  auto run = run_rss3([&](Rss3& p) -> Task<RingTensor> {
    auto bits = co_await p.to_bits(co_await share_of(p, 1, x), 64);
    co_return co_await p.reveal(co_await p.bit_to_arith(bits));
  });
  RingTensor want = x;
  for (auto& v : want) v &= 1;
  for (const auto& r : run.results) CHECK(r == want);
}

TEST_CASE("bit_dot: bits select values, summed over the last axis and truncated, in two rounds") {
  const std::size_t rows = 6, k = 5;
  RingTensor x = random_ring({rows, k}, 77), words = random_ring({rows, k}, 78);
  for (auto& v : x) v = static_cast<Ring>(static_cast<std::int64_t>(v) >> 20);  // |x| < 2^43: wraps nothing
  RingTensor want = RingTensor::from_shape({rows, 1});
  for (std::size_t r = 0; r < rows; ++r) {
    Ring sum = 0;
    for (std::size_t i = 0; i < k; ++i)
      if (words(r, i) & 1) sum += x(r, i);
    want(r, 0) = sum;
  }
  auto run = run_rss3([&](Rss3& p) -> Task<std::vector<RingTensor>> {
    auto bits = co_await p.to_bits(co_await share_of(p, 2, words), 64);
    auto values = co_await share_of(p, 1, x);
    std::vector<RingTensor> out;
    out.push_back(co_await p.reveal(co_await p.bit_dot(bits, values)));
    out.push_back(co_await p.reveal(co_await p.bit_dot(bits, values, 12)));
    co_return out;
  });
  const RingTensor want_truncated = ring_shift_floor(want, 12);
  for (const auto& r : run.results) {
    CHECK(r[0] == want);
    for (std::size_t i = 0; i < rows; ++i) {  // floor or floor + 1, as every truncation
      const auto off = static_cast<std::int64_t>(r[1](i, 0) - want_truncated(i, 0));
      CHECK((off == 0 || off == 1));
    }
  }
  RingTensor plain = run_plain([&](Plain& p) -> Task<RingTensor> {
    auto bits = co_await p.to_bits(co_await share_of(p, 2, words), 64);
    co_return co_await p.reveal(co_await p.bit_dot(bits, co_await share_of(p, 1, x)));
  });
  CHECK(plain == want);

  // Costs: 2n words (b0 b1 and b2 x) in the first round, one per row in the second.
  const RingTensor big = random_ring({40, 8}, 79);
  const auto cost = mpcache::testing::measure_op(big, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    const Rss3Bits bits{a.own, a.next};  // any words are an XOR sharing of some bits
    co_return co_await p.bit_dot(bits, a);  // (bits must outlive the task: a coroutine, not a forwarder)
  });
  CHECK(cost.rounds == 2);
  for (auto bytes : cost.bytes) CHECK(bytes == (2 * 320 + 40) * 8);
}

TEST_CASE("bit_dot refuses bits and values of different shapes") {
  auto run = run_rss3([&](Rss3& p) -> Task<std::string> {
    auto a = co_await share_of(p, 0, random_ring({4, 3}, 80));
    auto b = co_await share_of(p, 0, random_ring({4, 2}, 81));
    try {
      (void)co_await p.bit_dot(Rss3Bits{a.own, a.next}, b);
    } catch (const Error& e) {
      co_return std::string(e.what());
    }
    co_return std::string();
  });
  for (const auto& r : run.results) CHECK(r.find("rss3 bit_dot") != std::string::npos);
}
