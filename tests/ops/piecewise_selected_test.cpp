// piecewise_selected (piecewise.cppm): one polynomial per element, its piece
// selected after the comparisons; and the plan that says where it beats
// piecewise's every-piece form (many elements).
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
using mpcache::testing::linspace;
using mpcache::testing::run_both;
using mpcache::testing::share_of;

namespace {

double silu(double v) { return v / (1 + std::exp(-v)); }
double gelu(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

// f(p, spec) on x shaped (rows, n / rows): piecewise_selected where the
// backend sums products (rss3, plain), else piecewise (add2 runs of the suite).
template <class P>
Task<typename P::Share> selected_or_not(P& p, const typename P::Share& x, const ops::Piecewise& spec,
                                        const std::optional<typename P::Share>& times = std::nullopt, int shift = 0) {
  if constexpr (ops::detail::SumsProducts<P>) co_return co_await ops::piecewise_selected(p, x, spec, times, shift);
  else co_return co_await ops::piecewise(p, x, spec, times, shift);
}
}  // namespace

TEST_CASE("piecewise_selected: GeLU and SiLU within 1e-3 of float64, outliers included, either truncation") {
  RealTensor x = linspace(-12.0, 12.0, 2402);
  x(0) = -4095.0, x(2401) = 4095.0;  // far outside every polynomial piece
  FixedPoint fp;
  const RingTensor encoded = ring_reshape(fp.encode(x), {2, 1201});
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
      auto a = co_await share_of(p, 0, encoded);
      auto g = co_await p.reveal(co_await selected_or_not(p, a, ops::gelu_spec()));
      co_return std::array<RingTensor, 2>{g, co_await p.reveal(co_await selected_or_not(p, a, ops::silu_spec()))};
    }, Rss3Options{.exact_truncation = exact});
    CHECK(shape_of(secure.results[0][0]) == Shape{2, 1201});
    const RealTensor g = fp.decode(secure.results[0][0]), s = fp.decode(secure.results[0][1]);
    const RealTensor g_plain = fp.decode(clear[0]), s_plain = fp.decode(clear[1]);
    double worst_g = 0, worst_s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want_g = gelu(x(i)), want_s = silu(x(i));
      // Relative 1e-6 beside 1e-3: the identity piece at 4095 keeps x's own rounding.
      CHECK(std::fabs(g.data()[i] - want_g) <= 1e-3 + 1e-6 * std::fabs(want_g));
      CHECK(std::fabs(s.data()[i] - want_s) <= 1e-3 + 1e-6 * std::fabs(want_s));
      CHECK(std::fabs(g.data()[i] - g_plain.data()[i]) <= 1e-4);
      CHECK(std::fabs(s.data()[i] - s_plain.data()[i]) <= 1e-4);
      worst_g = std::max(worst_g, std::fabs(g.data()[i] - want_g));
      worst_s = std::max(worst_s, std::fabs(s.data()[i] - want_s));
    }
    MESSAGE("selected: GeLU max error " << worst_g << ", SiLU max error " << worst_s);
  }
}

TEST_CASE("piecewise_selected: silu_times' product, unshifted and at 2^-4, within 1e-3 |y|") {
  const std::size_t n = 1201;
  RealTensor x = linspace(-12.0, 12.0, n);
  const RealTensor y = mpcache::testing::random_real({n}, -5, 5, 404);
  x(0) = -4095.0, x(n - 1) = 4095.0;
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), ye = fp.encode(y);
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
      auto a = co_await share_of(p, 0, xe);
      auto b = co_await share_of(p, 1, ye);
      const std::optional<typename P::Share> times(b);
      auto whole = co_await p.reveal(co_await selected_or_not(p, a, ops::silu_spec(), times));
      co_return std::array<RingTensor, 2>{whole, co_await p.reveal(co_await selected_or_not(p, a, ops::silu_spec(), times, 4))};
    }, Rss3Options{.exact_truncation = exact});
    const RealTensor got = fp.decode(secure.results[0][0]), plain = fp.decode(clear[0]);
    const RealTensor shifted = fp.decode(secure.results[0][1]);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = silu(x(i)) * y(i);
      CHECK(std::fabs(got(i) - want) <= 1e-3 * std::fabs(y(i)) + 0x1p-17 + 1e-6 * std::fabs(want));
      CHECK(std::fabs(plain(i) - got(i)) <= 1e-3 * std::fabs(y(i)) + 0x1p-17);
      CHECK(std::fabs(16.0 * shifted(i) - want) <= 1e-3 * std::fabs(y(i)) + 0x1p-13 + 1e-6 * std::fabs(want));
    }
  }
}

// Rounds and bytes pinned, as the cost table's: 4 comparisons (msb_bits at
// 64 bits, 6 rounds), their B2A (2), t (1), t^2 and t^3, t^4 (2), low,
// high and t^4 y (1), the last sum of products (1).
TEST_CASE("piecewise_selected's rounds and bytes on rss3, against every piece, and where it pays") {
  FixedPoint fp;
  const std::size_t n = 4096;
  const RingTensor x = fp.encode(mpcache::testing::random_real({n}, -12.0, 12.0, 9));
  auto selected_silu_times = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::piecewise_selected(p, a, ops::silu_spec(), std::optional<Rss3Share>(a));
  };
  const OpCost cost = mpcache::testing::measure_op(x, selected_silu_times);
  testing::check_pinned("ops.piecewise_selected.rounds", cost.rounds);
  // The busiest party: msb_bits of 4n values, B2A of 4n bits and 8
  // products (t, its 3 powers, low, high, t^4 y, the last), 8 bytes an
  // element each (probabilistic truncation travels in the product's message).
  const OpCost compare = rss3_msb_cost(ring_bits, 4 * n);
  MESSAGE("piecewise_selected, silu_times over " << n << ": " << cost.bytes[0] << ", " << cost.bytes[1] << ", "
          << cost.bytes[2] << " bytes; msb_bits " << compare.bytes[0] << ", " << compare.bytes[1] << ", "
          << compare.bytes[2]);
  CHECK(cost.max_bytes() == compare.max_bytes() + 8 * 4 * n + 8 * 8 * n);

  // The plan: a decode step's MLP (one row of 1,024 or GPT-2's 3,072) keeps
  // the every-piece form and its 8 rounds; a 64-token prefill's (65,536)
  // would select first.
  using ops::detail::selecting_first_pays;
  const int f = default_frac_bits;
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    CHECK_FALSE(selecting_first_pays<Rss3Costs>(ops::silu_spec(), 1024, exact, true, f));
    CHECK_FALSE(selecting_first_pays<Rss3Costs>(ops::gelu_spec(), 3072, exact, false, f));
    CHECK(selecting_first_pays<Rss3Costs>(ops::silu_spec(), 65536, exact, true, f));
    CHECK(selecting_first_pays<Rss3Costs>(ops::gelu_spec(), 65536, exact, false, f));
  }
  auto each_silu_times = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::piecewise_each(p, a, ops::silu_spec(), std::optional<Rss3Share>(a));
  };
  const RingTensor many = fp.encode(mpcache::testing::random_real({16, 4096}, -12.0, 12.0, 10));
  const OpCost selected = mpcache::testing::measure_op(many, selected_silu_times);
  const OpCost each = mpcache::testing::measure_op(many, each_silu_times);
  testing::check_pinned("ops.piecewise.selected_each_rounds", std::vector<std::uint64_t>{selected.rounds, each.rounds});
  // Every piece: 3 polynomials (degrees 5, 8, 5) and the identity, each times y.
  MESSAGE("silu_times over 65,536 elements, busiest party: selected " << selected.max_bytes() << " bytes, "
          << selected.rounds << " rounds; every piece " << each.max_bytes() << " bytes, " << each.rounds << " rounds");
  CHECK(2 * selected.max_bytes() < each.max_bytes());

  // piecewise follows the plan: selected over the 65,536 elements, every
  // piece on one decode row, and selected on that row when told it is a
  // wave of 65,536 (waves of one activation compute what the whole would).
  auto planned = [](std::size_t plan_elements) {
    return [plan_elements](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
      co_return co_await ops::piecewise(p, a, ops::silu_spec(), std::optional<Rss3Share>(a), 0, plan_elements);
    };
  };
  const RingTensor row = fp.encode(mpcache::testing::random_real({1, 1024}, -12.0, 12.0, 11));
  testing::check_pinned("ops.piecewise.planned_rounds",
                        std::vector<std::uint64_t>{mpcache::testing::measure_op(many, planned(0)).rounds,
                                                   mpcache::testing::measure_op(row, planned(0)).rounds,
                                                   mpcache::testing::measure_op(row, planned(65536)).rounds});
}
