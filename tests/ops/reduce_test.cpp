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
using mpcache::testing::run_both;

namespace {
// Shared argmax (values, indices) of every row of x (encoded from xr)
// against the first of the row's largest values, on rss3 and plain.
template <class Run>
void run_and_check_argmax(const RealTensor& xr, const RingTensor& x, Run argmax) {
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 1, x);
    auto r = co_await argmax(p, a);
    co_return std::array<RingTensor, 2>{co_await p.reveal(r.value), co_await p.reveal(r.index)};
  });
  for (std::size_t i = 0; i < xr.shape()[0]; ++i) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < xr.shape()[1]; ++j)
      if (xr(i, j) > xr(i, best)) best = j;
    CHECK(secure.results[0][1](i, 0) == best);
    CHECK(secure.results[0][0](i, 0) == x(i, best));
  }
  CHECK(clear == secure.results[0]);
}
}  // namespace

TEST_CASE("argmax along the last axis: values, lowest index on ties, every length and group size") {
  FixedPoint fp;
  for (std::size_t arity : {0u, 2u, 3u, 4u, 7u, 16u})
  for (std::size_t n : {1u, 2u, 3u, 5u, 8u, 13u}) {
    CAPTURE(arity);
    CAPTURE(n);
    RealTensor xr = mpcache::testing::random_real({4, n}, -50, 50, 90 + n);
    // Row 1: all equal; row 2: two equal maxima.
    for (std::size_t j = 0; j < n; ++j) xr(1, j) = 3.5;
    if (n >= 3) xr(2, 0) = xr(2, n - 1) = 99.0;
    const RingTensor x = fp.encode(xr);
    run_and_check_argmax(xr, x, [arity]<class P>(P& p, const typename P::Share& a) {
      return ops::argmax_last(p, a, true, arity);
    });
  }
}

TEST_CASE("argmax rounds follow the tournament depth and the group size") {
  const RingTensor x = mpcache::testing::random_ring({2, 16}, 91);
  auto rounds = [&](std::size_t arity) {
    return mpcache::testing::measure_op(x, [arity](Rss3& p, const Rss3Share& a) {
      return ops::argmax_last(p, a, true, arity);
    }).rounds;
  };
  // Pairs: log2(16) = 4 levels x (msb_bits 6 + the winner's bit selecting
  // its value and index, bit_dot 2), the model's 32; measured, every level
  // after the first starts a round early (a comparison's lead sends its
  // first message without waiting for the previous level's last one).
  testing::check_pinned("ops.tournament.circuit.level_rounds_2_16", std::vector<std::uint64_t>{
      ops::tournament_level_rounds<Rss3Costs>(2), ops::tournament_level_rounds<Rss3Costs>(16)});
  CHECK(rounds(2) == 8 + 3 * 7);
  // Groups of 4: 2 levels x (6 + AND of 3 bits 2 + 2), the second level
  // starting a round early. One group of 16: 6 + AND of 15 bits 4 + 2.
  // Planned (arity 0): the link model picks one group for two short rows,
  // small groups for many long ones.
  CHECK(ops::tournament_plan<Rss3Costs>(2, 16) == std::vector<std::size_t>{16});
  testing::check_pinned("ops.argmax.rounds_by_arity", std::vector<std::uint64_t>{rounds(4), rounds(16), rounds(0)});
  // Many long rows: small groups (the comparisons' bytes matter), yet since
  // packed comparisons cost a sixth of A2B's bytes, groups of 3 rather
  // than pairs: 6 levels instead of 10.
  const auto many = ops::tournament_plan<Rss3Costs>(4096, 1024);
  CHECK(many.size() == 6);
  CHECK(many[0] == 3);
  // Per level: the plan costs no more on the link model than any single
  // group size, and for a long row of a few rows fewer rounds than groups
  // of 16 (11 rounds a level at 32 bits, three levels for 1000).
  auto plan_cost = [](const std::vector<std::size_t>& plan, std::size_t rows, std::size_t n, int width) {
    double seconds = 0;
    std::size_t rounds = 0;
    for (std::size_t m : plan) {
      const std::size_t mm = std::min(m, n), groups = (n + mm - 1) / mm;
      rounds += ops::tournament_level_rounds<Rss3Costs>(mm, width);
      seconds += lan_link().seconds(double(ops::tournament_level_rounds<Rss3Costs>(mm, width)),
                                          double(rows * groups) * ops::tournament_group_words<Rss3Costs>(mm, width) * 8);
      n = groups;
    }
    CHECK(n == 1);
    return std::pair{seconds, rounds};
  };
  for (std::size_t rows : {1u, 2u, 64u})
    for (std::size_t n : {7u, 100u, 1000u, 4096u}) {
      CAPTURE(rows);
      CAPTURE(n);
      const auto best = plan_cost(ops::tournament_plan<Rss3Costs>(rows, n, 32), rows, n, 32);
      for (std::size_t m = 2; m <= ops::tournament_max_group; ++m) {
        std::vector<std::size_t> uniform;
        for (std::size_t len = n; len > 1; len = (len + m - 1) / m) uniform.push_back(m);
        CHECK(best.first <= plan_cost(uniform, rows, n, 32).first + 1e-12);
      }
    }
  CHECK(plan_cost(ops::tournament_plan<Rss3Costs>(2, 1000, 32), 2, 1000, 32).second < 3 * ops::tournament_level_rounds<Rss3Costs>(16, 32));
}

TEST_CASE("argmax with narrowed comparisons: same values and indices within range, fewer rounds") {
  FixedPoint fp;
  const std::size_t n = 300;
  RealTensor xr = mpcache::testing::random_real({3, n}, -4000, 4000, 95);
  for (std::size_t j = 0; j < n; ++j) xr(1, j) = -4095.0;  // all equal, at the bottom of the range
  xr(2, 17) = xr(2, 250) = 4095.0;                          // tie at the top
  const RingTensor x = fp.encode(xr);
  const int width = ops::comparison_width(fp.frac_bits(), 12);  // |x| < 2^12
  CHECK(width == 32);
  run_and_check_argmax(xr, x, [width]<class P>(P& p, const typename P::Share& a) {
    return ops::argmax_last(p, a, true, 0, width);
  });
  const RingTensor row = ring_slice_last(x, 0, 16);
  auto rounds = [&](int w) {
    return mpcache::testing::measure_op(row, [w](Rss3& p, const Rss3Share& a) {
      return ops::argmax_last(p, a, true, 16, w);
    }).rounds;
  };
  testing::check_pinned("ops.argmax.rounds_by_width", std::vector<std::uint64_t>{rounds(64), rounds(32)});
}

TEST_CASE("argmax as a one-hot row: 1 at the first largest value, its index locally, every length") {
  FixedPoint fp;
  for (std::size_t n : {1u, 2u, 3u, 5u, 8u, 13u, 256u}) {
    CAPTURE(n);
    RealTensor xr = mpcache::testing::random_real({3, n}, -50, 50, 70 + n);
    for (std::size_t j = 0; j < n; ++j) xr(1, j) = 3.5;  // all equal: the first
    if (n >= 3) xr(2, 1) = xr(2, n - 1) = 99.0;           // two maxima: the lower index
    const RingTensor x = fp.encode(xr);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
      auto a = co_await share_of(p, 1, x);
      auto hot = co_await ops::argmax_onehot_last(p, a);
      co_return std::array<RingTensor, 2>{co_await p.reveal(hot), co_await p.reveal(ops::one_hot_index<P>(hot))};
    });
    for (std::size_t i = 0; i < 3; ++i) {
      std::size_t best = 0;
      for (std::size_t j = 1; j < n; ++j)
        if (xr(i, j) > xr(i, best)) best = j;
      for (std::size_t j = 0; j < n; ++j) CHECK(secure.results[0][0](i, j) == (j == best ? 1u : 0u));
      CHECK(secure.results[0][1](i) == best);
    }
    CHECK(clear == secure.results[0]);
  }
}

TEST_CASE("the one-hot argmax of a vocabulary row costs fewer rounds than the index and then one_hot") {
  const RingTensor x = mpcache::testing::random_ring({1, 256}, 93);
  const auto one_hot = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) {
    return ops::argmax_onehot_last(p, a);
  });
  const auto via_index = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    auto best = co_await ops::argmax_last(p, a);
    co_return co_await ops::one_hot(p, best.index, 256);
  });
  const auto index_only = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return (co_await ops::argmax_last(p, a)).index;
  });
  MESSAGE("rounds: one-hot argmax " << one_hot.rounds << ", argmax index " << index_only.rounds
                                    << ", index then one_hot " << via_index.rounds);
  CHECK(one_hot.rounds < via_index.rounds);
  CHECK(one_hot.rounds <= index_only.rounds + 1);
}
