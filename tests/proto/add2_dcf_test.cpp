// add2 with comparisons = dcf: msb_bits from the dealer's DCF keys (one
// online round), against the sign itself, the circuit path and the costs.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"
#include "../support/add2_parties.hpp"

using namespace mpcache;
using mpcache::testing::Add2OpCost;
using mpcache::testing::measure_add2;
using mpcache::testing::random_ring;
using mpcache::testing::run_add2;
using mpcache::testing::share_of;

namespace {

constexpr Add2Options dcf_options(std::uint64_t seed = 7) {
  return {.comparisons = Add2Comparisons::dcf, .insecure_seed = seed};
}

// An arithmetic result rather than an input (no fixed mask), as most
// compared values are.
Add2Share fresh(const Add2& p, const Add2Share& x) { return p.add(x, p.sub(x, x)); }

// Edge values of a w-bit signed comparison, then random ones in range.
RingTensor signed_edges(int width, std::uint64_t seed) {
  const std::int64_t top =
      width == 64 ? std::numeric_limits<std::int64_t>::max() : (std::int64_t{1} << (width - 1)) - 1;
  std::vector<std::int64_t> v{0, 1, -1, top, -top - 1, top - 1, -top, std::min<std::int64_t>(2, top), -2};
  RingTensor x = RingTensor::from_shape({v.size()});
  for (std::size_t i = 0; i < v.size(); ++i) x.data()[i] = static_cast<Ring>(v[i]);
  RingTensor r = random_ring({150}, seed);  // 159 elements in all: not a multiple of 64 or 8
  for (auto& e : r) e = static_cast<Ring>(static_cast<std::int64_t>(e) >> (64 - width));
  return ring_concat_last(x, r);
}

}  // namespace

TEST_CASE("add2 dcf: msb_bits is the sign on edge and random values at every width tested") {
  for (const int width : {2, 3, 8, 17, 27, 33, 63, 64}) {
    const RingTensor x = signed_edges(width, 40 + static_cast<std::uint64_t>(width));
    auto sign = [&](Add2Options options) {
      return run_add2(
          [&](Add2& p) -> Task<RingTensor> {
            auto s = co_await share_of(p, 1, x);
            co_return co_await p.reveal_bits(co_await p.msb_bits(fresh(p, s), width));
          },
          options);
    };
    const auto dcf = sign(dcf_options()), circuit = sign({.insecure_seed = 7});
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("width " << width << ", element " << i << ", value " << static_cast<std::int64_t>(x(i)));
      CHECK(dcf.results[0](i) == (static_cast<std::int64_t>(x(i)) < 0 ? 1u : 0u));
      CHECK(dcf.results[0](i) == circuit.results[0](i));
    }
  }
}

TEST_CASE("add2 dcf: less_than agrees with the clear comparison") {
  for (const int width : {5, 27, 64}) {
    // a - b = d at the edges of the w-bit range (a = d + b, b anything:
    // the comparison reads a - b mod 2^w).
    const RingTensor d = signed_edges(width, 7 + static_cast<std::uint64_t>(width));
    const RingTensor b = random_ring(shape_of(d), 9);
    const RingTensor a = ring_add(d, b);
    auto run = run_add2(
        [&](Add2& p) -> Task<RingTensor> {
          auto sa = co_await share_of(p, 0, a);
          auto sb = co_await share_of(p, 1, b);
          co_return co_await p.reveal(co_await ops::less_than(p, sa, sb, width));
        },
        dcf_options(11));
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("width " << width << ", a - b " << static_cast<std::int64_t>(d(i)));
      CHECK(run.results[0](i) == (static_cast<std::int64_t>(d(i)) < 0 ? 1u : 0u));
    }
  }
}

TEST_CASE("add2 dcf: msb_bits costs one round, ceil(w/8) bytes per element, and the dealer's keys") {
  constexpr std::size_t n = 1000;
  const RingTensor a = random_ring({n}, 1);
  for (const int width : {2, 27, 40, 64}) {
    INFO("width " << width);
    const Add2OpCost c = measure_add2(
        {a}, [width](Add2& p, auto& s) -> Task<Add2Bits> { co_return co_await p.msb_bits(fresh(p, s[0]), width); },
        dcf_options(3));
    const std::uint64_t online = static_cast<std::uint64_t>((width + 7) / 8) * n;
    CHECK(c.rounds == 1);
    CHECK(c.bytes[0] == online);
    CHECK(c.bytes[1] == online);
    // Both parties get the DCF corrections; party 1 also its shares of msb(r), a bit each.
    CHECK(c.dealer_bytes == 2 * dcf_correction_bytes(width - 1, 1, n) + n / 8);
    const OpCost model = Add2DcfCosts::msb_bits(width, n, 0);
    CHECK(model.rounds == c.rounds);
    CHECK(model.bytes[0] == c.bytes[0]);
    CHECK(model.bytes[1] == c.bytes[1]);
    CHECK(model.bytes[2] == 0);
  }
  // Pinned: w = 64 is 8 bytes each way per element and 2032 dealt bytes
  // (1016 to each party) plus a bit; w = 27: 4 bytes and 838.75 dealt.
  CHECK(Add2DcfCosts::msb_bits(64, n, 0).bytes[0] == 8000);
  CHECK(2 * dcf_correction_bytes(63, 1, n) + n / 8 == 2'032'125);
  CHECK(2 * dcf_correction_bytes(26, 1, n) + n / 8 == 838'875);
  // Everything else costs what the circuit model says.
  CHECK(Add2DcfCosts::mul(n).bytes[0] == Add2Costs::mul(n).bytes[0]);
  static_assert(CostModel<Add2DcfCosts>);
}

TEST_CASE("add2 dcf: argmax, ReLU and GeLU give the circuit path's results") {
  const RingTensor logits = [] {
    const auto x = mpcache::testing::random_real({3, 37}, -8.0, 8.0, 5);
    RingTensor t = FixedPoint(default_frac_bits).encode(x);
    t(1, 20) = t(1, 3) = FixedPoint(default_frac_bits).encode(9.0);  // a tie for the maximum: index 3 wins
    return t;
  }();
  auto run = [&](Add2Comparisons comparisons) {
    return run_add2(
        [&](Add2& p) -> Task<std::vector<RingTensor>> {
          auto x = co_await share_of(p, 0, logits);
          auto best = co_await ops::argmax_last(p, fresh(p, x));
          auto negative = co_await ops::msb(p, fresh(p, x));
          // ReLU: x - [x < 0] x, exact (no truncation).
          auto relu = p.sub(x, co_await p.mul(negative, x));
          auto gelu = co_await ops::gelu(p, fresh(p, x));
          co_return std::vector<RingTensor>{co_await p.reveal(best.value), co_await p.reveal(best.index),
                                            co_await p.reveal(relu), co_await p.reveal(gelu)};
        },
        {.exact_truncation = true, .comparisons = comparisons, .insecure_seed = 21});
  };
  const auto dcf = run(Add2Comparisons::dcf), circuit = run(Add2Comparisons::circuit);
  const auto& d = dcf.results[0];
  const auto& c = circuit.results[0];
  CHECK(d[0] == c[0]);
  CHECK(d[1] == c[1]);
  CHECK(d[2] == c[2]);
  for (std::size_t row = 0; row < 3; ++row) {  // the clear argmax, the lowest index on ties
    std::size_t best = 0;
    for (std::size_t j = 1; j < 37; ++j)
      if (static_cast<std::int64_t>(logits(row, j)) > static_cast<std::int64_t>(logits(row, best))) best = j;
    CHECK(d[1](row, 0) == best);
    CHECK(d[0](row, 0) == logits(row, best));
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const auto v = static_cast<std::int64_t>(logits.data()[i]);
    CHECK(static_cast<std::int64_t>(d[2].data()[i]) == std::max<std::int64_t>(v, 0));
  }
  // GeLU's pieces are chosen by comparisons (identical in both runs); its
  // polynomials truncate, and exact truncation's result (floor or one more)
  // depends on the masks, which the dcf path draws differently.
  for (std::size_t i = 0; i < logits.size(); ++i)
    CHECK(std::abs(static_cast<std::int64_t>(d[3].data()[i] - c[3].data()[i])) <= 64);
}

TEST_CASE("add2: parties whose comparisons differ from the dealer's are refused at setup") {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
    try {
      (void)co_await Add2Party::setup(network.endpoint(id),
                                      {.comparisons = id == 0 ? Add2Comparisons::dcf : Add2Comparisons::circuit});
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  CHECK(results[0].find("the dealer (party 2) uses 18 fraction bits, probabilistic truncation, circuit comparisons, "
                        "this party 18 fraction bits, probabilistic truncation, dcf comparisons") != std::string::npos);
  CHECK(results[1].empty());
}
