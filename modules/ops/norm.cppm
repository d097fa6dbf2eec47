// LayerNorm and RMSNorm over the last axis (d), with secret gamma (and beta).
//   layer_norm: y = (x - mean) rsqrt(var + eps) gamma + beta
//   rms_norm:   y = x rsqrt(mean(x^2) + eps) gamma
// Range: rows whose variance + eps (LayerNorm) or mean square + eps
// (RMSNorm) lies in [2^-10, 2^22).
// Where truncation is exact (truncates_exactly) both take one round fewer
// (detail::exact_spread_bits): LayerNorm 2 rounds before rsqrt, RMSNorm 1.
// Error: <= 2e-3 relative to the normalised scale (tested against float64).
export module mpcache.ops:norm;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :rsqrt;

export namespace mpcache::ops {

namespace detail {
// (..., d) -> (..., 1): sum over the last axis times 1/d, truncated; with
// extra_shift, divided by 2^extra_shift too.
template <Protocol P>
Task<typename P::Share> mean_last(P& p, const typename P::Share& x, int extra_shift = 0) {
  const Shape s = P::shape(x);
  const FixedPoint fp(p.frac_bits());
  const auto sum = sum_last<P>(x);
  if constexpr (ExactReals<P>) {  // exact 1/d instead of its fixed-point code
    const double inv = std::ldexp(1.0 / static_cast<double>(s.back()), -extra_shift);
    co_return p.map_real(sum, [inv](double v) { return v * inv; });
  }
  co_return co_await p.truncate(
      p.mul_public(sum, ring_filled(P::shape(sum), fp.encode(1.0 / static_cast<double>(s.back())))),
      p.frac_bits() + extra_shift);
}

template <Protocol P>
typename P::Share rows_of(const typename P::Share& v, const Shape& leading) {
  return P::apply(v, [&](const RingTensor& t) { return ring_tile_rows(t, leading); });
}

template <Protocol P>
Shape leading_shape(const typename P::Share& x) {
  Shape s = P::shape(x);
  s.pop_back();
  return s;
}
}  // namespace detail

namespace detail {
// The mean of squares over d as one truncation: 2^b <= d < 2^(b+1), so
// sum(x^2) / 2^(f+b) = mean(x^2) r with r = d / 2^b in [1, 2); the caller
// multiplies its numerator by sqrt(r) (rsqrt(ms r) sqrt(r) = rsqrt(ms)).
inline int mean_shift(std::size_t d) {
  int b = 0;
  while ((std::size_t{2} << b) <= d) ++b;
  return b;
}
inline double mean_ratio(std::size_t d) { return static_cast<double>(d) / std::ldexp(1.0, mean_shift(d)); }

// A norm is numerator * rsqrt(spread) (+ beta): spread (..., 1) is the
// mean square or variance plus eps, numerator (..., d) the (centred) row
// times gamma, with any public correction folded in.
template <Protocol P>
struct NormParts {
  typename P::Share spread;
  typename P::Share numerator;
  int extra_bits = 0;         // spread's fraction bits beyond f (rsqrt_then's extra_bits)
  double output_scale = 1.0;  // what rsqrt(spread) is multiplied by (rsqrt_then's output_scale)
};

// Where truncation is exact (truncates_exactly), a norm needs none of the
// shifts above: values up to 2^62 are safe, so x^2 (2^54 at |x| = 512) and
// x gamma are formed unshifted, and the sum of squares takes the mean's
// 1/2^b in its one truncation while keeping norm_spread_bits more fraction
// bits (rsqrt reads them for free), so that no truncation alone follows
// it: a row's sum carries up to d ulps at 2^-(f+12), 2^-18 for d = 4096.
// sqrt(r) goes into rsqrt's output scale instead of the numerator.
inline constexpr int norm_spread_bits = 12;
inline int exact_spread_bits(int f, std::size_t d) { return std::min(norm_spread_bits, f + mean_shift(d) - 1); }

// The exact way's parts from v (x, or x - mean) in one round: the spread
// (sum(v^2) / d + eps) r at 2^(f+X) and the numerator v gamma.
template <Protocol P>
Task<NormParts<P>> exact_parts(P& p, const typename P::Share& v, const typename P::Share& gamma, double eps) {
  const std::size_t d = P::shape(v).back();
  const int f = p.frac_bits(), b = mean_shift(d), X = exact_spread_bits(f, d);
  const double r = mean_ratio(d);
  auto spread = [&](P& q) -> Task<typename P::Share> {
    const auto total = sum_last<P>(co_await q.mul_trunc(v, v, f + b - X));
    co_return q.add_public(total, ring_filled(P::shape(total), FixedPoint(f + X).encode(eps * r)));
  };
  P pa = p.fork(), pb = p.fork();
  auto [sp, vg] = co_await when_all(spread(pa), pb.mul_trunc(v, rows_of<P>(gamma, leading_shape<P>(v))));
  co_return NormParts<P>{std::move(sp), std::move(vg), X, std::sqrt(r)};
}

// The squares are formed from x truncated by this many bits: x^2 at scale
// 2^(2f) reaches 2^52 on the outlier features of a trained model (|x| near
// 300), where truncation fails with probability ~2^-12 per element; the
// truncation audit counted 0.36 expected failures per 512-token prompt
// there, each one a garbage norm. At 2^(2f-6) that is 64 times rarer, and
// the squares keep 2^-15 resolution in x.
inline constexpr int norm_square_shift = 3;
// gamma is carried at 2^(f-4) in the numerator x gamma: x near 300 times
// gamma at 2^(2f) came within 2^45 of truncation's failure range, and a
// failure there is a garbage row of keys and values. gamma keeps 2^-14.
inline constexpr int norm_gamma_shift = 4;

// RMSNorm: x truncated by norm_square_shift, its squares truncated to 2^-(f+b)
// (each loses up to an ulp, so the mean square carries up to d/2 ulps of
// error: fine above 2^-10 for d <= 512, coarse for small mean squares of
// wide rows), and x gamma sqrt(r) meanwhile. 2 rounds (1 on the critical
// path: x's truncation is party 0's message alone).
template <Protocol P>
Task<NormParts<P>> rms_parts(P& p, const typename P::Share& x, const typename P::Share& gamma, double eps) {
  const std::size_t d = P::shape(x).back();
  const Shape lead = leading_shape<P>(x);
  if (truncates_exactly(p)) co_return co_await exact_parts(p, x, gamma, eps);
  const int b = mean_shift(d);
  const double r = mean_ratio(d);
  const FixedPoint fp(p.frac_bits());
  auto mean_square = [&](P& q) -> Task<typename P::Share> {  // (mean(x^2) + eps) r
    constexpr int S = norm_square_shift;
    auto low = co_await q.truncate(x, S);
    auto sq = co_await q.mul_trunc(low, low, q.frac_bits() - 2 * S + b);
    co_return add_constant(q, sum_last<P>(sq), eps * r);
  };
  auto numerator = [&](P& q) -> Task<typename P::Share> {  // x gamma sqrt(r)
    const Shape gs = P::shape(gamma);
    constexpr int G = norm_gamma_shift;
    auto g = co_await q.truncate(q.mul_public(gamma, ring_filled(gs, fp.encode(std::sqrt(r)))), q.frac_bits() + G);
    co_return co_await q.mul_trunc(x, rows_of<P>(g, lead), q.frac_bits() - G);
  };
  P pa = p.fork(), pb = p.fork();
  auto [ms, xg] = co_await when_all(mean_square(pa), numerator(pb));
  co_return NormParts<P>{std::move(ms), std::move(xg)};
}

// LayerNorm: the mean (and, for the squares, x and the mean truncated by
// norm_square_shift), the squares, the variance (a sum, then one
// truncation: folding 1/d into the squares' truncation would cost a
// low-variance row d/2 ulps), and (x - mean) gamma meanwhile. 2 rounds.
template <Protocol P>
Task<NormParts<P>> layer_parts(P& p, const typename P::Share& x, const typename P::Share& gamma, double eps) {
  constexpr int S = norm_square_shift;
  const std::size_t d = P::shape(x).back();
  const Shape lead = leading_shape<P>(x);
  if (truncates_exactly(p)) {  // the mean (its truncation alone), then the parts of x - mean
    const auto centered = p.sub(x, broadcast_last<P>(co_await mean_last(p, x), d));
    co_return co_await exact_parts(p, centered, gamma, eps);
  }
  // The mean, and x and the mean at 2^(f-S) for the squares, all at once.
  constexpr int G = norm_gamma_shift;
  P pm = p.fork(), pl = p.fork(), px = p.fork(), pg = p.fork();
  auto [mean, mean_low, x_low, gamma_low] =
      co_await when_all(mean_last(pm, x), mean_last(pl, x, S), px.truncate(x, S), pg.truncate(gamma, G));
  auto centered = p.sub(x, broadcast_last<P>(mean, d));
  auto centered_low = p.sub(x_low, broadcast_last<P>(mean_low, d));
  auto variance = [&](P& q) -> Task<typename P::Share> {
    auto var = co_await mean_last(q, co_await q.mul_trunc(centered_low, centered_low, q.frac_bits() - 2 * S));
    co_return add_constant(q, var, eps);
  };
  auto numerator = [&](P& q) -> Task<typename P::Share> {
    co_return co_await q.mul_trunc(centered, rows_of<P>(gamma_low, lead), q.frac_bits() - G);
  };
  P pa = p.fork(), pb = p.fork();
  auto [var, cg] = co_await when_all(variance(pa), numerator(pb));
  co_return NormParts<P>{std::move(var), std::move(cg)};
}
}  // namespace detail

// Critical path (rss3): layer_parts 2 (the mean's truncation is party 0's
// alone, so it overlaps), then rsqrt_times 15, whose last product is the
// norm's: 12 rounds. Range: variance + eps in [2^-10, 2^23) (2^22 where truncation is exact).
template <Protocol P>
Task<typename P::Share> layer_norm(P& p, const typename P::Share& x, const typename P::Share& gamma,
                                   const typename P::Share& beta, double eps = 1e-5) {
  const std::size_t d = P::shape(x).back();
  const Shape lead = detail::leading_shape<P>(x);
  if constexpr (ExactReals<P>) {
    auto mean = co_await detail::mean_last(p, x);
    auto centered = p.sub(x, broadcast_last<P>(mean, d));
    auto var = add_constant(p, co_await detail::mean_last(p, co_await p.mul_trunc(centered, centered)), eps);
    auto normed = co_await p.mul_trunc(centered, broadcast_last<P>(co_await rsqrt(p, var), d));
    co_return p.add(co_await p.mul_trunc(normed, detail::rows_of<P>(gamma, lead)), detail::rows_of<P>(beta, lead));
  } else {
    auto parts = co_await detail::layer_parts(p, x, gamma, eps);
    auto scaled = co_await rsqrt_times(p, parts.spread, std::optional<typename P::Share>(std::move(parts.numerator)),
                                       parts.extra_bits, parts.output_scale);
    co_return p.add(scaled, detail::rows_of<P>(beta, lead));
  }
}

// Critical path (rss3): rms_parts 2 (x's truncation is party 0's message
// alone and overlaps), then rsqrt_times 15, whose last product is the
// norm's: 12 rounds. Range: mean square + eps in [2^-10, 2^22) (the
// rsqrt input is up to twice it).
template <Protocol P>
Task<typename P::Share> rms_norm(P& p, const typename P::Share& x, const typename P::Share& gamma,
                                 double eps = 1e-5) {
  const std::size_t d = P::shape(x).back();
  const Shape lead = detail::leading_shape<P>(x);
  if constexpr (ExactReals<P>) {
    auto ms = co_await detail::mean_last(p, co_await p.mul_trunc(x, x));
    ms = add_constant(p, ms, eps);
    auto inv = co_await rsqrt(p, ms);
    auto normed = co_await p.mul_trunc(x, broadcast_last<P>(inv, d));
    co_return co_await p.mul_trunc(normed, detail::rows_of<P>(gamma, lead));
  } else {
    auto parts = co_await detail::rms_parts(p, x, gamma, eps);
    co_return co_await rsqrt_times(p, parts.spread, std::optional<typename P::Share>(std::move(parts.numerator)),
                                   parts.extra_bits, parts.output_scale);
  }
}

// The projections x W_i (no bias) of x = norm(h): RMSNorm, or LayerNorm
// when beta is given. The projections run while rsqrt's series does, and
// the norm's last product scales their rows instead of x's (beta W_i is
// added after): one round fewer than the norm followed by the matmuls,
// the same values up to truncation. weights[i]: (d, out_i), shares or any
// weight type P's matmul_trunc takes (rss3's compact Rss3Weight). The projection
// matmuls are charged to CostTag::linear, the rest to the caller's tag.
// With rows_mean_zero (h's rows have mean zero by construction, as GPT-2's
// residual stream with centred writers, load_gpt2), LayerNorm's variance
// is the mean square: its mean is not computed (under exact truncation a
// round alone). The float64 reference computes it all the same.
template <Protocol P, class W = typename P::Share>
Task<std::vector<typename P::Share>> norm_project(P& p, const typename P::Share& h, const typename P::Share& gamma,
                                                  const std::optional<typename P::Share>& beta, double eps,
                                                  const std::vector<const W*>& weights, bool rows_mean_zero = false) {
  using Share = typename P::Share;
  const std::size_t d = P::shape(h).back();
  const Shape lead = detail::leading_shape<P>(h);
  // x W_i for every i, concurrently (and beta W_i alongside when asked).
  std::vector<Share> beta_w(weights.size());
  auto project = [&](P& q, const Share& x, bool with_beta) -> Task<std::vector<Share>> {
    auto scope = cost_scope(q, CostTag::linear);
    std::vector<P> forks;
    std::vector<Task<Share>> products;
    for (std::size_t i = 0; i < weights.size(); ++i) forks.push_back(q.fork());
    if (with_beta)
      for (std::size_t i = 0; i < weights.size(); ++i) forks.push_back(q.fork());
    const std::optional<Share> beta_row = with_beta ? std::optional(reshape<P>(*beta, {1, d})) : std::nullopt;
    for (std::size_t i = 0; i < weights.size(); ++i) products.push_back(forks[i].matmul_trunc(x, *weights[i]));
    if (with_beta)
      for (std::size_t i = 0; i < weights.size(); ++i)
        products.push_back(forks[weights.size() + i].matmul_trunc(*beta_row, *weights[i]));
    auto done = co_await when_all(std::move(products));
    std::vector<Share> out;
    for (std::size_t i = 0; i < weights.size(); ++i) out.push_back(std::move(done[i]));
    if (with_beta)
      for (std::size_t i = 0; i < weights.size(); ++i) beta_w[i] = std::move(done[weights.size() + i]);
    co_return out;
  };
  if constexpr (ExactReals<P>) {
    Share x;
    if (beta) x = co_await layer_norm(p, h, gamma, *beta, eps);
    else x = co_await rms_norm(p, h, gamma, eps);
    co_return co_await project(p, x, false);
  } else {
    std::optional<detail::NormParts<P>> parts;
    if (beta && !rows_mean_zero) parts = co_await detail::layer_parts(p, h, gamma, eps);
    else parts = co_await detail::rms_parts(p, h, gamma, eps);
    auto then = [&](P& q, const Share& factor) { return project(q, factor, beta.has_value()); };
    auto out = co_await rsqrt_then(p, parts->spread, std::optional<Share>(std::move(parts->numerator)), then,
                                   parts->extra_bits, parts->output_scale);
    if (beta)
      for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = p.add(out[i], detail::rows_of<P>(reshape<P>(beta_w[i], {P::shape(beta_w[i]).back()}), lead));
    co_return out;
  }
}

}  // namespace mpcache::ops
