// The prefill's softmax: softmax_apply (the weights'
// normalisation on the outputs), max_upper_last (the row max read to 1/16,
// on 50 bits), below_coarse (exp's clip on 50 bits), the
// tournament's pairs by the difference, and the bytes of each, pinned on
// a prefill-sized batch (64 rows of 512 scores, exact truncation).
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
using mpcache::testing::run_both;
using mpcache::testing::share_of;

namespace {
constexpr std::size_t rows = 64, n = 512;

// Scores of a causal prefill's shape: 64 rows of 512, spread over [-10, 0].
RingTensor prefill_scores() {
  RealTensor x = RealTensor::from_shape({rows * n});
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = -double((i * 7919) % 1000) / 100.0;
  return FixedPoint().encode(x);
}

OpCost measure(const RingTensor& x, auto op) {
  return mpcache::testing::measure_op(x, op, Rss3Options{.exact_truncation = true, .insecure_seed = 1});
}
Rss3Share as_rows(const Rss3Share& a) { return ops::reshape<Rss3>(a, {rows, n}); }
}  // namespace

TEST_CASE("softmax_apply: softmax(x) v against float64, masked or not, under either truncation") {
  const std::size_t r = 6, k = 200, d = 8;
  RealTensor x = mpcache::testing::random_real({r, k}, -12, 12, 611);
  x(1, 3) = 4000;  // an outlier the max must find
  const RealTensor v = mpcache::testing::random_real({k, d}, -4, 4, 612);
  RingTensor mask = ring_filled({r, k}, 1);
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 20 * (i + 1); j < k; ++j) mask(i, j) = 0;  // causal-like rows
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), ve = fp.encode(v);
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
      auto a = co_await share_of(p, 0, xe);
      auto b = co_await share_of(p, 1, ve);
      co_return co_await p.reveal(co_await ops::softmax_apply(p, a, b, std::optional<RingTensor>(mask)));
    }, Rss3Options{.exact_truncation = exact});
    const RealTensor out = fp.decode(secure.results[0]);
    // softmax's 4e-3 per weight bounds sum_j |v_j| 4e-3; measured far below.
    const double bound = exact ? 5e-4 : 1e-2;
    double worst = 0;
    for (std::size_t i = 0; i < r; ++i) {
      double mx = -1e300, sum = 0;
      for (std::size_t j = 0; j < k; ++j)
        if (mask(i, j)) mx = std::max(mx, x(i, j));
      for (std::size_t j = 0; j < k; ++j)
        if (mask(i, j)) sum += std::exp(x(i, j) - mx);
      for (std::size_t c = 0; c < d; ++c) {
        double want = 0;
        for (std::size_t j = 0; j < k; ++j)
          if (mask(i, j)) want += std::exp(x(i, j) - mx) / sum * v(j, c);
        worst = std::max(worst, std::fabs(out(i, c) - want));
        CHECK(std::fabs(out(i, c) - want) <= bound);
      }
    }
    MESSAGE("softmax_apply worst output error (" << (exact ? "exact" : "probabilistic") << "): " << worst);
    const RealTensor c = fp.decode(clear);
    for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::fabs(c.data()[i] - out.data()[i]) <= 1e-2);
  }
}

TEST_CASE("below_coarse: 1 below c, 0 from c + 2^(drop + 1 - f), outliers included") {
  const double c = -14.0;
  std::vector<double> xs;
  for (double x = -20.0; x <= 2.0; x += 1.0 / 64) xs.push_back(x);
  for (double big : {4095.0, 1e9, -1e9, -4095.0, -14.0 - 1e-5, -14.0}) xs.push_back(big);
  RealTensor x = RealTensor::from_shape({xs.size()});
  std::copy(xs.begin(), xs.end(), x.data());
  FixedPoint fp;
  const RingTensor xe = fp.encode(x);
  for (int drop : {0, 14, 18}) {
    CAPTURE(drop);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
      auto a = co_await share_of(p, 0, xe);
      co_return co_await p.reveal(co_await ops::below_coarse(p, a, c, drop));
    });
    const double sure_above = c + std::ldexp(2.0, drop - fp.frac_bits());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      const Ring got = secure.results[0].data()[i];
      CHECK((got == 0 || got == 1));
      const double encoded = fp.decode(xe.data()[i]);
      if (encoded < c) CHECK(got == 1);
      if (encoded >= sure_above) CHECK(got == 0);
      CHECK((clear.data()[i] == 0 || clear.data()[i] == 1));
    }
  }
}

TEST_CASE("max and argmax by pairs of differences agree with plain, ties to the lower index") {
  RealTensor x = mpcache::testing::random_real({5, 37}, -50, 50, 613);
  x(2, 10) = x(2, 30) = 900;  // a tie: index 10
  x(4, 0) = -4000;
  x(4, 36) = 4000;
  FixedPoint fp;
  const RingTensor xe = fp.encode(x);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 0, xe);
    // Plans for many rows (a prefill's): pairs by the difference.
    auto r = co_await ops::argmax_last(p, a, true, 0, ring_bits, 1 << 20);
    co_return std::array<RingTensor, 2>{co_await p.reveal(r.value), co_await p.reveal(r.index)};
  });
  for (std::size_t i = 0; i < 5; ++i) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < 37; ++j)
      if (x(i, j) > x(i, best)) best = j;
    CHECK(secure.results[0][1].data()[i] == best);
    CHECK(secure.results[0][0].data()[i] == xe(i, best));
    CHECK(clear[1].data()[i] == best);
  }
  CHECK(secure.results[0][1].data()[2] == 10);
  // The plan on rss3's circuit: its pairs by the difference (cheaper than
  // by bits at the same rounds), and some.
  std::size_t pairs = 0;
  for (const auto& level : ops::tournament_levels<Rss3Costs>(1 << 20, 37)) {
    if (level.m == 2) CHECK(level.by_difference);
    pairs += level.m == 2;
  }
  CHECK(pairs > 0);
  // Where the bits' way is asked for (top-k's one-hot tournament), none.
  for (const auto& level : ops::tournament_levels<Rss3Costs>(1 << 20, 37, ring_bits, lan_link(), false, false))
    CHECK_FALSE(level.by_difference);
}

TEST_CASE("max_upper_last: an upper bound of the row max within 3/16, for values up to 2^40 and ties") {
  RealTensor x = mpcache::testing::random_real({6, 45}, -30, 30, 977);
  for (std::size_t j = 0; j < 45; ++j) {
    x(3, j) = 5.0;                                        // all tied
    x(4, j) = (j % 2 ? 1.0 : -1.0) * std::ldexp(1.0, 40);  // far apart, both signs
    x(5, j) = -std::ldexp(1.0, 40) + double(j) / 64;      // close together, far below 0
  }
  x(0, 44) = 29.99;
  x(1, 0) = 29.9999;  // just below the next 1/16
  x(2, 7) = 30.0;      // on a multiple of 1/16
  FixedPoint fp;
  const RingTensor xe = fp.encode(x);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, xe);
    co_return co_await p.reveal(co_await ops::max_upper_last(p, a, ops::softmax_max_drop(p.frac_bits())));
  });
  for (std::size_t i = 0; i < 6; ++i) {
    Ring row_max = xe(i, 0);
    for (std::size_t j = 1; j < 45; ++j)
      if (static_cast<std::int64_t>(xe(i, j)) > static_cast<std::int64_t>(row_max)) row_max = xe(i, j);
    for (const RingTensor* got : {&secure.results[0], &clear}) {
      const auto above = static_cast<std::int64_t>(got->data()[i] - row_max);  // m - M, as ring integers
      CHECK(above >= 0);
      CHECK(above <= std::int64_t{3} << (fp.frac_bits() - 4));
    }
  }
}

// Exact counts on rss3's circuit with exact truncation, 64 x 512 scores
// (bytes: the busiest party). Before this suite's changes: max 84.2
// bytes a score (its plan for 64 rows), exp_neg 118.3, softmax 218.3.
TEST_CASE("the prefill softmax's costs per score, pinned") {
  const RingTensor x = prefill_scores();
  auto per_score = [](const OpCost& c) { return double(c.max_bytes()) / double(rows * n); };
  // The row max planned on 4,096 rows (a prefill wave's): pairs by the
  // difference, 32.3 bytes a score and 66 rounds, some levels by the sign's
  // arithmetic 0/1 (B2A, then a product); by bit_dot alone 40.2 and 63,
  // by the bits' pairs 55.8.
  const OpCost max = measure(x, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::max_last(p, as_rows(a), 0, ring_bits, 4096);
  });
  // softmax's: the scores read to 1/16 (max_upper_last), 50-bit comparisons.
  const OpCost upper = measure(x, [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::max_upper_last(p, as_rows(a), ops::softmax_max_drop(p.frac_bits()), 4096);
  });
  // exp: z^2 from x + 8 (no truncation of x), the low half in the
  // product's dot_trunc, the clip on 50 bits: 85.3 bytes.
  const OpCost exp = measure(x, [](Rss3& p, const Rss3Share& a) { return ops::exp_neg(p, a); });
  const OpCost clip = measure(x, [](Rss3& p, const Rss3Share& a) { return ops::below_coarse(p, a, -14.0, 14); });
  const OpCost full_clip = measure(x, [](Rss3& p, const Rss3Share& a) { return ops::msb(p, a); });
  MESSAGE("per score: max " << per_score(max) << " bytes, " << max.rounds << " rounds; upper bound "
                            << per_score(upper) << ", " << upper.rounds << "; exp " << per_score(exp)
                            << ", " << exp.rounds << "; clip " << per_score(clip) << " against " << per_score(full_clip));
  testing::check_pinned("ops.prefill_softmax.max", std::vector<std::uint64_t>{max.max_bytes(), max.rounds});
  CHECK(upper.max_bytes() < max.max_bytes());
  CHECK(upper.rounds <= max.rounds);
  testing::check_pinned("ops.prefill_softmax.max_upper", std::vector<std::uint64_t>{upper.max_bytes(), upper.rounds});
  testing::check_pinned("ops.prefill_softmax.exp", std::vector<std::uint64_t>{exp.max_bytes(), exp.rounds});
  CHECK(clip.max_bytes() < full_clip.max_bytes());
  testing::check_pinned("ops.prefill_softmax.clip_bytes", clip.max_bytes());
}
