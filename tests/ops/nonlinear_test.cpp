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
using mpcache::testing::linspace;

// Runs f on rss3 and plain; returns the decoded rss3 result and checks that
// plain agrees within `backend_tolerance`.
template <class F>
RealTensor evaluate(const RealTensor& x, F f, double backend_tolerance, Rss3Options options = {}) {
  FixedPoint fp;
  const RingTensor encoded = fp.encode(x);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, encoded);
    co_return co_await p.reveal(co_await f(p, a));
  }, options);
  const RealTensor s = fp.decode(secure.results[0]), c = fp.decode(clear);
  for (std::size_t i = 0; i < s.size(); ++i) CHECK(std::fabs(s.data()[i] - c.data()[i]) <= backend_tolerance);
  return s;
}
}  // namespace

// The three ways (exp.cppm): the squarings under probabilistic truncation,
// the polynomial where truncation is exact, the spline where comparisons
// are rss3 dcf's too (plain, which takes the squarings, stays within the
// bound of each).
TEST_CASE("exp_neg: within 2.5e-3 of exp on [-14, 0] and within 1e-6 below; 3e-4 where truncation is exact") {
  const RealTensor x = linspace(-20.0, 0.0, 4001);
  for (auto [exact, comparisons] : {std::pair{false, Rss3Comparisons::circuit}, std::pair{true, Rss3Comparisons::circuit},
                                    std::pair{true, Rss3Comparisons::dcf}}) {
    CAPTURE(exact);
    CAPTURE(comparisons == Rss3Comparisons::dcf);
    auto y = evaluate(x, []<class P>(P& p, const typename P::Share& a) { return ops::exp_neg(p, a); },
                      2.5e-3, Rss3Options{.exact_truncation = exact, .comparisons = comparisons});
    const double bound = exact ? 3e-4 : 2.5e-3;
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(y(i) - std::exp(x(i)));
      if (x(i) >= -14.0) {
        worst = std::max(worst, err);
        CHECK(err <= bound);
      } else {
        CHECK(err <= 1e-6);
      }
    }
    MESSAGE("exp_neg max error on [-14, 0], " << std::string(exact ? "exact" : "probabilistic")
                                               << " truncation, "
                                               << std::string(comparisons == Rss3Comparisons::dcf ? "dcf" : "circuit")
                                               << ": " << worst);
  }
}

TEST_CASE("reciprocal: relative error within 2e-4 + 2^-18/x on [1/8, 2^22]") {
  RealTensor x = RealTensor::from_shape({2000});
  for (std::size_t i = 0; i < x.size(); ++i)  // log-uniform over the range, edges included
    x(i) = std::exp2(-3.0 + 25.0 * static_cast<double>(i) / (x.size() - 1));
  // Seeded: under probabilistic truncation a product near x = 1/8 fails
  // with probability about 2^-20 per value (top of reciprocal.cppm), which
  // an unseeded run met about once in twenty.
  auto y = evaluate(x, []<class P>(P& p, const typename P::Share& a) { return ops::reciprocal(p, a); },
                    1e-3, Rss3Options{.insecure_seed = 11});
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = 1.0 / x(i);
    const double rel = std::fabs(y(i) - want) / want;
    const double bound = 2e-4 + 0x1p-18 / want + 0x1p-18 / x(i);
    worst = std::max(worst, rel);
    CHECK(std::fabs(y(i) - want) <= bound * want + 0x1p-17);
  }
  MESSAGE("reciprocal max relative error: " << worst);
}

TEST_CASE("reciprocal narrowed to x < 2^11 (a softmax sum): the same bound on [1/8, 2^11)") {
  RealTensor x = RealTensor::from_shape({800});
  for (std::size_t i = 0; i < x.size(); ++i)
    x(i) = std::min(std::exp2(-3.0 + 14.0 * static_cast<double>(i) / (x.size() - 1)), 0x1p11 - 0x1p-18);
  auto y = evaluate(x, []<class P>(P& p, const typename P::Share& a) { return ops::reciprocal(p, a, 11); }, 1e-3,
                    Rss3Options{.insecure_seed = 12});
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = 1.0 / x(i);
    CHECK(std::fabs(y(i) - want) <= (2e-4 + 0x1p-18 / want + 0x1p-18 / x(i)) * want + 0x1p-17);
  }
}

// reciprocal_then carries each multiplicand through the Newton products
// where rss3 dcf's one-hot is arithmetic (and takes 1/x then one product
// elsewhere): m / x within the reciprocal's relative bound, under both
// truncations and both comparisons.
TEST_CASE("reciprocal_then: m / x within 2e-4 relative on [1, 2^11) (softmax sums), rss3 dcf and circuit") {
  const std::size_t n = 400, d = 3;
  RealTensor x = RealTensor::from_shape({n, 1});
  for (std::size_t i = 0; i < n; ++i)
    x(i, 0) = std::min(std::exp2(11.0 * static_cast<double>(i) / (n - 1)), 0x1p11 - 0x1p-18);
  const RealTensor m = mpcache::testing::random_real({n, d}, -4, 4, 405);
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), me = fp.encode(m);
  for (auto comparisons : {Rss3Comparisons::circuit, Rss3Comparisons::dcf})
    for (bool exact : {false, true}) {
      CAPTURE(exact);
      CAPTURE(comparisons == Rss3Comparisons::dcf);
      auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
        auto a = co_await share_of(p, 0, xe);
        auto b = co_await share_of(p, 1, me);
        auto make = [&b](P&) -> Task<std::vector<typename P::Share>> { co_return std::vector{b}; };
        co_return co_await p.reveal((co_await ops::reciprocal_then(p, a, make, 11)).front());
      }, Rss3Options{.exact_truncation = exact, .comparisons = comparisons, .insecure_seed = 3});
      const RealTensor y = fp.decode(secure.results[0]);
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t k = 0; k < d; ++k) {
          const double want = m(i, k) / x(i, 0);
          const double bound = (2e-4 + 0x1p-18 / x(i, 0)) * std::fabs(want) + 0x1p-15;
          worst = std::max(worst, std::fabs(y(i, k) - want) / bound);
          CAPTURE(x(i, 0));
          CHECK(std::fabs(y(i, k) - want) <= bound);
        }
      MESSAGE("reciprocal_then: largest error " << worst << " of its bound");
    }
}

TEST_CASE("softmax with scores up to +-4095, close maxima, one row of equal scores") {
  const std::size_t rows = 3, n = 70;
  RealTensor x = mpcache::testing::random_real({rows, n}, -4000, 4000, 402);
  x(0, 5) = 4095.0, x(0, 6) = 4094.0, x(0, 7) = -4095.0;  // two close maxima at the top
  for (std::size_t j = 0; j < n; ++j) x(2, j) = -4095.0;  // uniform at the bottom
  FixedPoint fp;
  const RingTensor encoded = fp.encode(x);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, encoded);
    co_return co_await p.reveal(co_await ops::softmax_last(p, a));
  });
  const RealTensor y = fp.decode(secure.results[0]);
  for (std::size_t r = 0; r < rows; ++r) {
    double mx = -1e300, sum = 0;
    for (std::size_t j = 0; j < n; ++j) mx = std::max(mx, x(r, j));
    for (std::size_t j = 0; j < n; ++j) sum += std::exp(x(r, j) - mx);
    for (std::size_t j = 0; j < n; ++j) CHECK(std::fabs(y(r, j) - std::exp(x(r, j) - mx) / sum) <= 4e-3);
  }
  CHECK(std::fabs(y(0, 5) - 1 / (1 + std::exp(-1.0))) <= 4e-3);
  CHECK(std::fabs(y(2, 0) - 1.0 / n) <= 4e-3);
  const RealTensor c = fp.decode(clear);
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::fabs(c.data()[i] - y.data()[i]) <= 4e-3);
}

TEST_CASE("softmax with and without a mask, against float64") {
  const std::size_t rows = 4, n = 100;
  RealTensor x = mpcache::testing::random_real({rows, n}, -8, 8, 401);
  RingTensor mask = ring_filled({rows, n}, 1);
  for (std::size_t j = 50; j < n; ++j) mask(3, j) = 0;  // last row: half masked
  FixedPoint fp;
  const RingTensor encoded = fp.encode(x);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 0, encoded);
    auto plain_softmax = co_await ops::softmax_last(p, a);
    auto masked = co_await ops::softmax_last(p, a, std::optional<RingTensor>(mask));
    co_return std::array<RingTensor, 2>{co_await p.reveal(plain_softmax), co_await p.reveal(masked)};
  });
  for (int which = 0; which < 2; ++which) {
    const RealTensor y = fp.decode(secure.results[0][which]);
    for (std::size_t r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (std::size_t j = 0; j < n; ++j)
        if (which == 0 || mask(r, j)) mx = std::max(mx, x(r, j));
      for (std::size_t j = 0; j < n; ++j)
        if (which == 0 || mask(r, j)) sum += std::exp(x(r, j) - mx);
      for (std::size_t j = 0; j < n; ++j) {
        const double want = (which == 0 || mask(r, j)) ? std::exp(x(r, j) - mx) / sum : 0.0;
        CHECK(std::fabs(y(r, j) - want) <= 4e-3);
      }
    }
    const RealTensor c = fp.decode(clear[which]);
    for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::fabs(c.data()[i] - y.data()[i]) <= 4e-3);
  }
}

// Where truncation is exact, e v is formed before the reciprocal; under
// probabilistic truncation softmax_times is softmax then the product.
TEST_CASE("softmax_times: softmax(x) v and softmax(x) against float64, masked or not, under either truncation") {
  const std::size_t rows = 4, n = 100, d = 8;
  const RealTensor x = mpcache::testing::random_real({rows, n}, -8, 8, 403);
  const RealTensor v = mpcache::testing::random_real({n, d}, -4, 4, 404);
  RingTensor mask = ring_filled({rows, n}, 1);
  for (std::size_t j = 50; j < n; ++j) mask(3, j) = 0;
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), ve = fp.encode(v);
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
      auto a = co_await share_of(p, 0, xe);
      auto b = co_await share_of(p, 1, ve);
      auto [out, probs] = co_await ops::softmax_times(p, a, b, std::optional<RingTensor>(mask));
      co_return std::array<RingTensor, 2>{co_await p.reveal(out), co_await p.reveal(probs)};
    }, Rss3Options{.exact_truncation = exact});
    const RealTensor out = fp.decode(secure.results[0][0]), probs = fp.decode(secure.results[0][1]);
    // The squarings' exp error (about 1e-3 per entry) adds up over a row of
    // v; the polynomial's (1.2e-4) far less.
    const double out_bound = exact ? 5e-4 : 1e-2;
    double worst_out = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (std::size_t j = 0; j < n; ++j)
        if (mask(r, j)) mx = std::max(mx, x(r, j));
      for (std::size_t j = 0; j < n; ++j)
        if (mask(r, j)) sum += std::exp(x(r, j) - mx);
      std::vector<double> want_out(d, 0.0);
      for (std::size_t j = 0; j < n; ++j) {
        const double want = mask(r, j) ? std::exp(x(r, j) - mx) / sum : 0.0;
        CHECK(std::fabs(probs(r, j) - want) <= 4e-3);
        for (std::size_t k = 0; k < d; ++k) want_out[k] += want * v(j, k);
      }
      for (std::size_t k = 0; k < d; ++k) {
        worst_out = std::max(worst_out, std::fabs(out(r, k) - want_out[k]));
        CHECK(std::fabs(out(r, k) - want_out[k]) <= out_bound);
      }
    }
    MESSAGE("softmax_times worst output error: " << worst_out);
    const RealTensor c = fp.decode(clear[0]);
    for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::fabs(c.data()[i] - out.data()[i]) <= 1e-2);  // plain squares
  }
}

TEST_CASE("exp_neg's rounds: 10 by squarings; exact, 9 (circuit), 3 with truncation pairs and dcf") {
  FixedPoint fp;
  const RingTensor x = fp.encode(linspace(-10, 0, 32));
  auto exp_op = [](Rss3& p, const Rss3Share& a) { return ops::exp_neg(p, a); };
  // Probabilistic: max(truncate + 8 squarings, comparison: 8) + select.
  const std::uint64_t probabilistic = mpcache::testing::measure_op(x, exp_op).rounds;
  // Exact, two rounds per truncation: max(4 x 2, comparison: 8) + select.
  const std::uint64_t exact =
      mpcache::testing::measure_op(x, exp_op, Rss3Options{.exact_truncation = true, .insecure_seed = 1}).rounds;
  // With dcf comparisons the spline (piecewise), with pairs at every shift
  // it truncates by (60 - f for t^2, 2f for the folded sum's product):
  // max(2, msb_arith: 2) + dot_trunc (the polynomial took 5).
  const int f = default_frac_bits;
  const Rss3Options pairs{.exact_truncation = true, .comparisons = Rss3Comparisons::dcf, .insecure_seed = 1,
                          .truncation_pairs_budget = std::uint64_t{64} << 20};
  const std::uint64_t with_pairs =
      mpcache::testing::measure_op_with_pairs(x, exp_op, pairs, {60 - f, 2 * f}, 4096).rounds;
  testing::check_pinned("ops.exp_neg.rounds", std::vector<std::uint64_t>{probabilistic, exact, with_pairs});
}

// Exact truncation folds each piece's last truncation (piecewise.cppm) and,
// with dcf comparisons, takes the splines (activations.cppm); plain keeps
// the high-degree pieces, so there the two backends differ by both fits'
// errors.
TEST_CASE("GeLU and SiLU within 1e-3 of float64 over [-12, 12], under either truncation") {
  const RealTensor x = linspace(-12.0, 12.0, 2401);
  for (auto [exact, comparisons] : {std::pair{false, Rss3Comparisons::circuit}, std::pair{true, Rss3Comparisons::circuit},
                                    std::pair{true, Rss3Comparisons::dcf}}) {
    CAPTURE(exact);
    CAPTURE(comparisons == Rss3Comparisons::dcf);
    const Rss3Options options{.exact_truncation = exact, .comparisons = comparisons};
    // (exact, not just dcf: MPCACHE_TEST_RSS3_COMPARISONS=dcf runs every case on dcf)
    const double backends_apart = exact ? 6e-4 : 1e-4;
    auto g = evaluate(x, []<class P>(P& p, const typename P::Share& a) { return ops::gelu(p, a); },
                      backends_apart, options);
    auto s = evaluate(x, []<class P>(P& p, const typename P::Share& a) { return ops::silu(p, a); },
                      backends_apart, options);
    double worst_g = 0, worst_s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = x(i);
      const double gelu = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      const double silu = v / (1 + std::exp(-v));
      worst_g = std::max(worst_g, std::fabs(g(i) - gelu));
      worst_s = std::max(worst_s, std::fabs(s(i) - silu));
      CHECK(std::fabs(g(i) - gelu) <= 1e-3);
      CHECK(std::fabs(s(i) - silu) <= 1e-3);
    }
    MESSAGE("GeLU max error " << worst_g << ", SiLU max error " << worst_s);
  }
}

TEST_CASE("silu_times(x, y) within 1e-3 |y| of silu(x) y, in SiLU's rounds, large inputs included") {
  const std::size_t n = 1201;
  RealTensor x = linspace(-12.0, 12.0, n);
  const RealTensor y = mpcache::testing::random_real({n}, -5, 5, 404);
  x(0) = -4095.0, x(n - 1) = 4095.0;  // outliers, as a trained MLP has
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), ye = fp.encode(y);
  // Unshifted, and at 2^(f-4) (as the decoder feeds the down projection).
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 0, xe);
    auto b = co_await share_of(p, 1, ye);
    auto whole = co_await p.reveal(co_await ops::silu_times(p, a, b));
    co_return std::array<RingTensor, 2>{whole, co_await p.reveal(co_await ops::silu_times(p, a, b, 4))};
  });
  const RealTensor got = fp.decode(secure.results[0][0]), plain = fp.decode(clear[0]);
  const RealTensor got_shifted = mpcache::testing::scaled(fp.decode(secure.results[0][1]), 16.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = x(i) / (1 + std::exp(-x(i))) * y(i);
    CHECK(std::fabs(got(i) - want) <= 1e-3 * std::fabs(y(i)) + 0x1p-17 + 1e-6 * std::fabs(want));
    CHECK(std::fabs(plain(i) - got(i)) <= 1e-3 * std::fabs(y(i)) + 0x1p-17);
    CHECK(std::fabs(got_shifted(i) - want) <= 1e-3 * std::fabs(y(i)) + 0x1p-13 + 1e-6 * std::fabs(want));
  }
  const auto cost = mpcache::testing::measure_op(xe, [&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::silu_times(p, a, a);
  });
  testing::check_pinned("ops.silu_times.rounds", cost.rounds);
  // The spline (exact truncation, dcf comparisons), within the same bound.
  auto [spline, spline_plain] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    auto a = co_await share_of(p, 0, xe);
    auto b = co_await share_of(p, 1, ye);
    co_return co_await p.reveal(co_await ops::silu_times(p, a, b));
  }, Rss3Options{.exact_truncation = true, .comparisons = Rss3Comparisons::dcf});
  const RealTensor by_spline = fp.decode(spline.results[0]);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = x(i) / (1 + std::exp(-x(i))) * y(i);
    CHECK(std::fabs(by_spline(i) - want) <= 1e-3 * std::fabs(y(i)) + 0x1p-17 + 1e-6 * std::fabs(want));
  }
}

// Both ways (rsqrt.cppm): y0 and the series; where truncation is exact, a
// degree-4 polynomial (plain, which takes the series, then differs by up to
// 1e-4 relative: 3.2e-3 at rsqrt(2^-10) = 32).
TEST_CASE("rsqrt: relative error within 1e-3 on [2^-10, 2^23), under either truncation") {
  RealTensor x = RealTensor::from_shape({2000});
  for (std::size_t i = 0; i < x.size(); ++i)  // the last sample is the largest code below 2^23
    x(i) = std::min(std::exp2(-10.0 + 33.0 * static_cast<double>(i) / (x.size() - 1)), 0x1p23 - 0x1p-18);
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    auto y = evaluate(x, []<class P>(P& p, const typename P::Share& a) { return ops::rsqrt(p, a); },
                      exact ? 4e-3 : 1e-3, Rss3Options{.exact_truncation = exact});
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = 1.0 / std::sqrt(x(i));
      worst = std::max(worst, std::fabs(y(i) - want) / want);
      CHECK(std::fabs(y(i) - want) <= 1e-3 * want + 0x1p-17);
    }
    MESSAGE("rsqrt max relative error, " << std::string(exact ? "exact" : "probabilistic") << ": " << worst);
  }
}

// Where truncation is exact and comparisons are rss3 dcf, reciprocal and
// rsqrt take octave pieces (octaves.cppm): within their quadratic's
// relative error plus 2^-19 (Z and Y), and two ulps of the result per group
// (against x^e of x as encoded, which is coarse near 2^-17; each group's
// dot_trunc may round up). In batches of 100: on larger ones rss3's costs
// of inline dcf keys choose the series instead (the old bound, tested above).
TEST_CASE("octave pieces: 1/x on [1/8, 2^22] and 1/sqrt(x) on [2^-17, 2^23) within q's error and 2 ulps per group") {
  const Rss3Options dcf_exact{.exact_truncation = true, .comparisons = Rss3Comparisons::dcf, .insecure_seed = 5};
  const std::size_t n = 1500, batch = 100;
  auto check_power = [&](auto op, const ops::OctavePower& power, double low, double high, double tolerance) {
    const double e = power.exponent;
    const auto plan = ops::detail::octave_plan(power, default_frac_bits, static_cast<int>(low),
                                               static_cast<int>(high), 1.0, default_frac_bits);
    const double ulps = 2 * static_cast<double>(plan.groups.size() + 1) * 0x1p-18;
    double worst = 0;
    for (std::size_t first = 0; first < n; first += batch) {
      RealTensor x = RealTensor::from_shape({batch});
      for (std::size_t i = 0; i < batch; ++i)
        x(i) = std::min(std::exp2(low + (high - low) * static_cast<double>(first + i) / (n - 1)),
                        std::exp2(high) - 0x1p-18);
      const RealTensor y = evaluate(x, op, tolerance, dcf_exact);
      for (std::size_t i = 0; i < batch; ++i) {
        const double encoded = FixedPoint().decode(FixedPoint().encode(x).data()[i]);
        const double want = std::pow(encoded, e), error = std::fabs(y(i) - want);
        const double bound = (power.relative_error + 0x1p-19) * want + ulps;
        worst = std::max(worst, error / bound);
        CAPTURE(x(i));
        CHECK(error <= bound);
      }
    }
    MESSAGE("x^" << e << " by octave pieces: largest error " << worst << " of its bound");
  };
  check_power([]<class P>(P& p, const typename P::Share& a) { return ops::reciprocal(p, a); },
              ops::octave_reciprocal, -3, 22, 1e-3);
  // plain takes the series, coarse below its range's 2^-10: compared with
  // float64 alone.
  check_power([]<class P>(P& p, const typename P::Share& a) { return ops::rsqrt(p, a); }, ops::octave_rsqrt, -17,
              23, 1e3);
}

namespace {
// LayerNorm (with beta) and RMSNorm of x's rows, revealed: {rss3's LayerNorm,
// rss3's RMSNorm, plain's LayerNorm, plain's RMSNorm}.
std::array<RealTensor, 4> norms_of(const RealTensor& x, const RealTensor& gamma, const RealTensor& beta,
                                   bool exact) {
  FixedPoint fp;
  const RingTensor xe = fp.encode(x), ge = fp.encode(gamma), be = fp.encode(beta);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 0, xe);
    auto g = co_await share_of(p, 1, ge);
    auto b = co_await share_of(p, 1, be);
    auto ln = co_await ops::layer_norm(p, a, g, b);
    auto rms = co_await ops::rms_norm(p, a, g);
    co_return std::array<RingTensor, 2>{co_await p.reveal(ln), co_await p.reveal(rms)};
  }, Rss3Options{.exact_truncation = exact});
  return {fp.decode(secure.results[0][0]), fp.decode(secure.results[0][1]), fp.decode(clear[0]),
          fp.decode(clear[1])};
}

// Both against float64 within 2e-3 (1 + |want|), and LayerNorm's row
// `loose_row` within 5e-3 more.
void check_norms(const RealTensor& x, const RealTensor& gamma, const RealTensor& beta, const RealTensor& ln,
                 const RealTensor& rms, std::optional<std::size_t> loose_row = std::nullopt) {
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0, ms = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += x(r, j) / d, ms += x(r, j) * x(r, j) / d;
    for (std::size_t j = 0; j < d; ++j) var += (x(r, j) - mean) * (x(r, j) - mean) / d;
    for (std::size_t j = 0; j < d; ++j) {
      const double want_ln = (x(r, j) - mean) / std::sqrt(var + 1e-5) * gamma(j) + beta(j);
      const double want_rms = x(r, j) / std::sqrt(ms + 1e-5) * gamma(j);
      CHECK(std::fabs(ln(r, j) - want_ln) <= 2e-3 * (1 + std::fabs(want_ln)) + 5e-3 * (loose_row == r));
      CHECK(std::fabs(rms(r, j) - want_rms) <= 2e-3 * (1 + std::fabs(want_rms)));
    }
  }
}
}  // namespace

TEST_CASE("LayerNorm and RMSNorm against float64, under either truncation") {
  const std::size_t rows = 6, d = 64;
  RealTensor x = mpcache::testing::random_real({rows, d}, -3, 3, 501);
  for (std::size_t j = 0; j < d; ++j) x(5, j) = 0.01 * x(5, j) + 2.0;  // tiny variance row
  const RealTensor gamma = mpcache::testing::random_real({d}, 0.5, 1.5, 502);
  const RealTensor beta = mpcache::testing::random_real({d}, -0.5, 0.5, 503);
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    // Both backends against float64; the tiny-variance row (5) keeps only
    // about 7 significant bits of variance in fixed point, hence its looser
    // bound.
    const auto [ln, rms, plain_ln, plain_rms] = norms_of(x, gamma, beta, exact);
    check_norms(x, gamma, beta, ln, rms, 5);
    check_norms(x, gamma, beta, plain_ln, plain_rms, 5);
  }
}

// Where truncation is exact the norms square x unshifted (norm.cppm): rows
// of GPT-2's width with outliers of a trained model's size stay in range.
TEST_CASE("exact truncation: LayerNorm and RMSNorm over 768 features with outliers near 400") {
  const std::size_t rows = 3, d = 768;
  RealTensor x = mpcache::testing::random_real({rows, d}, -2, 2, 521);
  x(0, 5) = 400.0, x(1, 700) = -380.0, x(2, 0) = 250.0, x(2, 1) = -250.0;
  const RealTensor gamma = mpcache::testing::random_real({d}, 0.5, 1.5, 522);
  const RealTensor beta = mpcache::testing::random_real({d}, -0.5, 0.5, 523);
  const auto [ln, rms, plain_ln, plain_rms] = norms_of(x, gamma, beta, true);
  check_norms(x, gamma, beta, ln, rms);
}

TEST_CASE("norm_project: norm(h) W for RMSNorm and LayerNorm, the projections in the norm's rounds") {
  const std::size_t rows = 3, d = 32, out = 5;
  const RealTensor h = mpcache::testing::random_real({rows, d}, -3, 3, 511);
  const RealTensor gamma = mpcache::testing::random_real({d}, 0.5, 1.5, 512);
  const RealTensor beta = mpcache::testing::random_real({d}, -0.5, 0.5, 513);
  const RealTensor w1 = mpcache::testing::random_real({d, out}, -0.3, 0.3, 514);
  const RealTensor w2 = mpcache::testing::random_real({d, 2 * out}, -0.3, 0.3, 515);
  FixedPoint fp;
  const RingTensor he = fp.encode(h), ge = fp.encode(gamma), be = fp.encode(beta), w1e = fp.encode(w1),
                   w2e = fp.encode(w2);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 4>> {
    auto x = co_await share_of(p, 0, he);
    auto g = co_await share_of(p, 1, ge);
    auto b = co_await share_of(p, 1, be);
    auto a1 = co_await share_of(p, 1, w1e);
    auto a2 = co_await share_of(p, 1, w2e);
    auto rms = co_await ops::norm_project(p, x, g, std::nullopt, 1e-5, {&a1, &a2});
    auto ln = co_await ops::norm_project(p, x, g, std::optional(b), 1e-5, {&a1, &a2});
    co_return std::array<RingTensor, 4>{co_await p.reveal(rms[0]), co_await p.reveal(rms[1]), co_await p.reveal(ln[0]),
                                        co_await p.reveal(ln[1])};
  });
  for (const auto* result : {&secure.results[0], &clear}) {
    for (int which = 0; which < 4; ++which) {
      const bool layer = which >= 2;
      const auto& w = which % 2 == 0 ? w1 : w2;
      const RealTensor got = fp.decode((*result)[which]);
      for (std::size_t r = 0; r < rows; ++r) {
        double mean = 0, ms = 0;
        for (std::size_t j = 0; j < d; ++j) mean += h(r, j) / d;
        for (std::size_t j = 0; j < d; ++j) {
          const double u = layer ? h(r, j) - mean : h(r, j);
          ms += u * u / d;
        }
        for (std::size_t c = 0; c < w.shape()[1]; ++c) {
          double want = 0, scale = 0;
          for (std::size_t j = 0; j < d; ++j) {
            const double u = layer ? h(r, j) - mean : h(r, j);
            const double normed = u / std::sqrt(ms + 1e-5) * gamma(j) + (layer ? beta(j) : 0.0);
            want += normed * w(j, c);
            scale += std::fabs(w(j, c)) * (1 + std::fabs(normed));
          }
          CHECK(std::fabs(got(r, c) - want) <= 2e-3 * scale + 1e-4);
        }
      }
    }
  }
  // The projections cost no round beyond the norm's.
  const RingTensor row = fp.encode(linspace(0.5, 4.0, 8));
  auto rounds_of = [&](bool layer) {
    return mpcache::testing::measure_op(row, [layer](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
      const auto x = ops::reshape<Rss3>(a, {1, 8});
      const auto w = ops::reshape<Rss3>(a, {8, 1});
      std::optional<Rss3Share> beta;
      if (layer) beta = a;
      auto out = co_await ops::norm_project(p, x, a, beta, 1e-5, {&w});
      co_return std::move(out[0]);
    }).rounds;
  };
  // (LayerNorm one more here: its comparisons' leads fall differently.)
  testing::check_pinned("ops.norm_project.rounds", std::vector<std::uint64_t>{rounds_of(false), rounds_of(true)});
}

TEST_CASE("norms truncate nothing above 2^47 on rows with outlier features of 300") {
  // rss3's truncation of x fails with probability ~|x|/2^64: 2^-17 per
  // element at 2^47. Plain's audit sees every truncated value exactly.
  const std::size_t rows = 4, d = 64;
  RealTensor x = mpcache::testing::random_real({rows, d}, -2, 2, 611);
  for (std::size_t r = 0; r < rows; ++r) x(r, 3) = r % 2 ? 300.0 : -300.0;  // a massive-activation feature
  const RealTensor gamma = mpcache::testing::random_real({d}, 0.5, 1.5, 612);
  FixedPoint fp;
  Scheduler scheduler;
  Plain p;
  auto audit = std::make_shared<TruncationAudit>();
  p.audit_truncations(audit);
  const PlainShare xs{fp.encode(x)}, gs{fp.encode(gamma)};
  const auto [rms, ln] = sync_wait(scheduler, [&]() -> Task<std::array<RingTensor, 2>> {
    auto a = co_await ops::rms_norm(p, xs, gs);
    auto b = co_await ops::layer_norm(p, xs, gs, gs);
    co_return std::array<RingTensor, 2>{a.value, b.value};
  }());
  for (const auto& [where, site] : audit->sites) {
    INFO(where);
    CHECK(site.max_abs < 0x1p47);
  }
  // ... and still normalise those rows (the outlier is 300 / sqrt(ms) gamma).
  for (std::size_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (std::size_t j = 0; j < d; ++j) ms += x(r, j) * x(r, j) / d;
    const double want = x(r, 3) / std::sqrt(ms + 1e-5) * gamma(3);
    CHECK(fp.decode(rms)(r, 3) == doctest::Approx(want).epsilon(2e-3));
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += x(r, j) / d;
    for (std::size_t j = 0; j < d; ++j) var += (x(r, j) - mean) * (x(r, j) - mean) / d;
    const double want_ln = (x(r, 3) - mean) / std::sqrt(var + 1e-5) * gamma(3) + gamma(3);
    CHECK(fp.decode(ln)(r, 3) == doctest::Approx(want_ln).epsilon(2e-3));
  }
}

TEST_CASE("round counts of the non-linear functions match the documented costs") {
  FixedPoint fp;
  const RingTensor x = fp.encode(linspace(0.5, 4.0, 8));
  auto rounds_of = [&](auto op) { return mpcache::testing::measure_op(x, op).rounds; };
  // reciprocal: highest bit over 41 bits (42-bit comparisons: msb_bits in
  // groups of 6, 5 rounds), x' by bit_dot 2, then 3; over 29 bits (x <
  // 2^11) msb_bits 5 as well.
  testing::check_pinned("ops.rounds.circuit.reciprocal",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::reciprocal(p, a); }));
  testing::check_pinned("ops.rounds.circuit.reciprocal_below_2^11",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::reciprocal(p, a, 11); }));
  CHECK(rss3_msb_cost(42, 1).rounds == 5);
  CHECK(rss3_msb_cost(42, 1).group == 6);
  CHECK(rss3_msb_cost(30, 1).rounds == 5);
  // rsqrt: highest bit over 41 bits (msb_bits 5), x' and y0 by bit_dot 2, then 4.
  testing::check_pinned("ops.rounds.circuit.rsqrt",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::rsqrt(p, a); }));
  // Piecewise: the comparisons' msb_bits 6, then the pieces selected by bit_dot 2.
  testing::check_pinned("ops.rounds.circuit.gelu",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::gelu(p, a); }));
  testing::check_pinned("ops.rounds.circuit.silu",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::silu(p, a); }));
  // RMSNorm: x truncated (party 0's message alone: it overlaps) and x^2 1,
  // then rsqrt_times 11, whose last product is the norm's.
  testing::check_pinned("ops.rounds.circuit.rms_norm", rounds_of([](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::rms_norm(p, ops::reshape<Rss3>(a, {1, 8}), a);
  }));
  // LayerNorm: mean, squares and variance 2 (the mean's truncation is party
  // 0's alone and overlaps), then as RMSNorm.
  testing::check_pinned("ops.rounds.circuit.layer_norm", rounds_of([](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::layer_norm(p, ops::reshape<Rss3>(a, {1, 8}), a, a);
  }));
  // softmax over 8: max in one group of 8 (msb_bits 6 + AND 3 + bit_dot 2 =
  // 11), exp 10, reciprocal of a sum below 16 (w = 22: 23-bit comparisons'
  // msb_bits in groups of 6, 4 rounds, bit_dot 2, then 3 = 9), product 1;
  // each step starts a round early where a comparison's lead had nothing
  // to wait for (which party leads rotates from call to call, so a step
  // may also start a round later than the sum suggests).
  testing::check_pinned("ops.rounds.circuit.softmax_8", rounds_of([](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    const auto row = ops::reshape<Rss3>(a, {1, 8});
    co_return co_await ops::softmax_last(p, row);
  }));
}

// Where truncation is exact and every product has a truncation pair (rss3
// with dcf comparisons): exp by its polynomial, each piecewise polynomial's
// sum truncated with its last products, and softmax_times' product with v
// beside the reciprocal.
TEST_CASE("round counts where truncation is exact, with truncation pairs and dcf comparisons") {
  FixedPoint fp;
  const RingTensor x = fp.encode(linspace(0.5, 4.0, 8));
  const int f = default_frac_bits;
  const Rss3Options pairs{.exact_truncation = true, .comparisons = Rss3Comparisons::dcf, .insecure_seed = 1,
                          .truncation_pairs_budget = std::uint64_t{256} << 20};
  // Every shift the ops below truncate by: up to 2f (products, folded sums,
  // the octave pieces' squares and dots, octaves.cppm) and 60 - f (a
  // polynomial piece's t^2, piecewise.cppm). Enough pairs that the deepest
  // fork of the octave pieces' dots still holds some.
  std::vector<int> every_shift;
  for (int d = 1; d <= 2 * f; ++d) every_shift.push_back(d);
  every_shift.push_back(60 - f);
  auto rounds_of = [&](auto op) {
    return mpcache::testing::measure_op_with_pairs(x, op, pairs, every_shift, 16384).rounds;
  };
  // Piecewise: max(msb_arith 2, the pieces) + dot_trunc 1. The splines'
  // degree-4 pieces take 2 (t and t^2 at once, then the sum folded in):
  // SiLU and GeLU 3 (with the degree-8 and -10 pieces: 4 and 5).
  testing::check_pinned("ops.rounds.pairs_dcf.silu",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::silu(p, a); }));
  testing::check_pinned("ops.rounds.pairs_dcf.gelu",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::gelu(p, a); }));
  const auto piecewise_gelu = [](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::piecewise(p, a, ops::gelu_spec());  // (its defaults must outlive it)
  };
  testing::check_pinned("ops.rounds.pairs_dcf.piecewise_gelu", rounds_of(piecewise_gelu));
  // silu_times: the product with y after the polynomial.
  testing::check_pinned("ops.rounds.pairs_dcf.silu_times",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::silu_times(p, a, a); }));
  // softmax then its product with v, against softmax_times: one round less.
  const auto row = [](const Rss3Share& a) { return ops::reshape<Rss3>(a, {1, 8}); };
  const auto column = [](const Rss3Share& a) { return ops::reshape<Rss3>(a, {8, 1}); };
  const auto apart = rounds_of([&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    auto probs = co_await ops::softmax_last(p, row(a));
    co_return co_await p.matmul_trunc(probs, column(a));
  });
  const auto fused = rounds_of([&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return (co_await ops::softmax_times(p, row(a), column(a))).first;
  });
  CHECK(fused + 1 == apart);
  testing::check_pinned("ops.rounds.pairs_dcf.softmax_times", fused);
  MESSAGE("softmax over 8 then v: " << apart << " rounds, softmax_times " << fused);
  // rsqrt by octave pieces (octaves.cppm): msb_arith 2 beside the squares,
  // then one dot_trunc: 3 (x' by dot_trunc, then x'^2 | q | q g took 6).
  // RMSNorm adds its squares before and the rows' product after: 5;
  // LayerNorm its mean too: 6.
  auto rounds_with_every_shift = rounds_of;
  const auto rsqrt_rounds = rounds_with_every_shift([](Rss3& p, const Rss3Share& a) { return ops::rsqrt(p, a); });
  const auto rms_rounds = rounds_with_every_shift([&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::rms_norm(p, row(a), a);
  });
  const auto layer_rounds = rounds_with_every_shift([&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    co_return co_await ops::layer_norm(p, row(a), a, a);
  });
  MESSAGE("rsqrt " << rsqrt_rounds << ", RMSNorm " << rms_rounds << ", LayerNorm " << layer_rounds);
  testing::check_pinned("ops.rounds.pairs_dcf.rsqrt", rsqrt_rounds);
  testing::check_pinned("ops.rounds.pairs_dcf.rms_norm", rms_rounds);
  testing::check_pinned("ops.rounds.pairs_dcf.layer_norm", layer_rounds);
  // The reciprocal the same way: 3 (its Newton series took 6), and the
  // products with softmax's numerators one more.
  testing::check_pinned("ops.rounds.pairs_dcf.reciprocal",
                        rounds_of([](Rss3& p, const Rss3Share& a) { return ops::reciprocal(p, a); }));
  // norm_project over rows of mean zero (GPT-2's centred residual stream,
  // load_gpt2): LayerNorm skips its mean, RMSNorm's rounds.
  auto project_rounds = [&](bool layer, bool mean_zero) {
    return rounds_with_every_shift([&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
      const Rss3Share w = ops::reshape<Rss3>(a, {8, 1});
      const std::vector<const Rss3Share*> weights{&w};
      const auto beta = layer ? std::optional<Rss3Share>(a) : std::nullopt;
      co_return (co_await ops::norm_project(p, row(a), a, beta, 1e-5, weights, mean_zero)).front();
    });
  };
  CHECK(project_rounds(true, true) == project_rounds(false, false));
  CHECK(project_rounds(true, true) + 1 == project_rounds(true, false));
}
