// 1/sqrt(x) for positive x: the highest set bit p of x (as in reciprocal,
// over w = f + 23 bits) gives x' = x 2^(K-p) / 2^(K-f+1) in [0.5, 1) and
// the public correction g(p) = 2^(-(p-f+1)/2) as local weighted sums; so
// does the initial guess y0 = a - b x' (its slope folded into the weights),
// chosen so that e = 1 - x' y0^2 stays within |e| <= 0.045. Then
// 1/sqrt(x') = y0 (1 - e)^(-1/2) = y0 (1 + e/2 + 3e^2/8) up to 2.8e-5
// relative, and 1/sqrt(x) = 1/sqrt(x') g.
//   rounds after the highest bit's A2B: x' and y0 (bit_dot, 2) | y0^2 and
//   y0 g | e = 1 - x' y0^2 | 3e^2/4 | y0 g (2 + e + 3e^2/4) / 2: six, where
//   B2A, three Newton steps and the scalings took thirteen.
// Where truncation is exact (truncates_exactly), a degree-4 polynomial in
// x' replaces y0 and the series: q(x') = c0 + c1 x' + x'^2 (c2 + c3 x' +
// c4 x'^2), the Chebyshev interpolant of 1/sqrt on [0.5, 1] (relative
// error 8.4e-5); its product reaches 2^58 before the truncation, which only
// exact truncation is safe at.
//   rounds after the highest bit's A2B: x'^2 and m g | q, then(m g) |
//   then(m g) q: three, where y0 and the series take four.
// Where truncation is exact and detail::octave_power_pays (rss3 dcf, or few
// values on the circuit), neither: octave pieces (octaves.cppm), 3 rounds
// with dcf on [2^-17, 2^23), with `then` running on m beside the
// comparisons and the rows' product after.
// rsqrt_times(x, m) multiplies m (..., d) by rsqrt(x) (..., 1) in the last
// product, so a norm pays no extra round for it; rsqrt_then also applies a
// row-linear map (a norm's projections) while the series is computed.
//   range: 2^-10 <= x < 2^23 (variances and mean squares in LayerNorm/RMSNorm)
//   error: relative <= 1e-3 + 2^-17 absolute (tested on dense samples)
//   cost (rss3): 11 rounds: 5 for the highest bit (42-bit comparisons,
//   msb_bits), x' and -b x' by bit_dot (2: B2A fused with the products), then 4
//   (tested); with an arithmetic one-hot (rss3 dcf, detail::ArithmeticOneHot,
//   where the cost model says so) 2 (msb_arith) + 1 (dot_trunc) + 4 = 7
export module mpcache.ops:rsqrt;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :octaves;
import :reciprocal;

export namespace mpcache::ops {

// x < 2^23: norms of trained models can meet rows with mean squares far
// above 2^13 (outlier activations); a narrower highest-bit search (32 bits,
// two rounds fewer) would turn those rows into garbage.
inline constexpr int rsqrt_max_log2 = 23;
// The octave pieces' range starts at 2^-17: a norm's eps (1e-5) is above it.
inline constexpr int rsqrt_min_log2 = -17;
inline constexpr int rsqrt_slope_guard_bits = 2;  // -b 2^(K-t) keeps 2 more bits
inline constexpr int rsqrt_extra_bits = 2;  // g and y0 g carried at 2^(f+2)
inline constexpr int rsqrt_series_shift = 4;  // the series carried at 2^(f-4)
// With m, m y0 g (the argument of `then`) is formed at 2^(f-4): a norm's
// projections of it then stay 16 times further from truncation's failure
// range (their failures are garbage keys and values); it keeps 2^-14.
inline constexpr int rsqrt_factor_shift = 4;
// The initial guess y0 = a - b x' that minimises max |1 - x' y0^2| on [0.5, 1).
inline constexpr double rsqrt_guess_a = 1.7875, rsqrt_guess_b = 0.81;
// The exact way's q(x') ~ 1/sqrt(x') on [0.5, 1]: c0..c4, the degree-4
// Chebyshev interpolant (nodes cos((k + 1/2) pi / 5) mapped to [0.5, 1]).
inline constexpr std::array<double, 5> rsqrt_polynomial{2.9228837662012177, -5.434977545271545, 6.719651141033821,
                                                        -4.331924622359294, 1.1244305836499602};

namespace detail {
// The exact way (top of this file), from x' (..., 1) at 2^f in [0.5, 1) and
// the correction g at 2^(f + rsqrt_extra_bits): then(m g) q(x'), or q(x') g
// without m.
template <Protocol P, class Then>
Task<std::vector<typename P::Share>> rsqrt_polynomial_then(P& p, const typename P::Share& xn,
                                                           const typename P::Share& g,
                                                           const std::optional<typename P::Share>& m, Then then) {
  using Share = typename P::Share;
  constexpr int E = rsqrt_extra_bits, F = rsqrt_factor_shift;
  const int f = p.frac_bits();
  const auto& c = rsqrt_polynomial;
  // x'^2, c0 + c1 x' (a truncation alone) and m g at 2^(f-F), at once.
  auto factor = [&](P& q) -> Task<Share> {
    if (!m) co_return g;
    co_return co_await q.mul_trunc(*m, broadcast_last<P>(g, P::shape(*m).back()), f + E + F);
  };
  auto linear = [&](P& q) -> Task<Share> {  // c0 + c1 x'
    const std::array<Share, 1> terms{xn};
    const std::array<double, 1> coefficient{c[1]};
    co_return add_constant(q, co_await q.truncate(weighted_terms<P>(q, terms, coefficient, f), f), c[0]);
  };
  P ps = p.fork(), pl = p.fork(), pf = p.fork();
  auto [square, low, scaled] = co_await when_all(ps.mul_trunc(xn, xn), linear(pl), factor(pf));
  // q = c0 + c1 x' + x'^2 (c2 + c3 x' + c4 x'^2): the bracket at 2^(2f),
  // its product with x'^2 truncated by 2f; then(m g) meanwhile.
  auto polynomial = [&](P& q) -> Task<Share> {
    const std::array<Share, 2> terms{xn, square};
    const std::array<double, 2> coefficients{c[3], c[4]};
    const Share with_c2 = q.add_public(weighted_terms<P>(q, terms, coefficients, f),
                                       ring_filled(P::shape(xn), FixedPoint(2 * f).encode(c[2])));
    co_return q.add(low, co_await q.mul_trunc(square, with_c2, 2 * f));
  };
  P pt = p.fork(), pq = p.fork();
  auto [outputs, series] = co_await when_all(then(pt, scaled), polynomial(pq));
  // outputs at 2^(f-F) (m g) or 2^(f+E) (g); q at 2^f
  co_return co_await rows_times(p, outputs, series, m.has_value(), m ? f - F : f + E);
}
}  // namespace detail

// The rows of `then(m y0 g)` times the series (2 + e + 3e^2/4) / 2, i.e.
// then(m) * broadcast(1/sqrt(x)) for any `then` that is linear in the rows
// of its argument and keeps its fixed-point scale (the identity, or a
// projection x W by matmul_trunc): `then` runs while
// the series is computed, so a norm followed by projections pays one round
// less. x (..., 1), m (..., d); without m, then(1/sqrt(x) before the series).
//
// Where truncation is exact, x may carry `extra_bits` more fraction bits
// (x at 2^(f + extra_bits), up to 12: a norm's sum of squares, truncated
// once, keeps its precision so), and the result is scaled by the public
// `output_scale` (folded into g: a norm's sqrt(d / 2^b)), both free.
template <Protocol P, class Then>
Task<std::vector<typename P::Share>> rsqrt_then(P& p, const typename P::Share& x,
                                                const std::optional<typename P::Share>& m, Then then,
                                                int extra_bits = 0, double output_scale = 1.0) {
  using Share = typename P::Share;
  constexpr int K = reciprocal_scale_bits, E = rsqrt_extra_bits, F = rsqrt_factor_shift;
  const int f = p.frac_bits();
  const Shape shape = P::shape(x);
  const FixedPoint fp(f);
  const int width = detail::value_width(f, rsqrt_max_log2);
  if (extra_bits != 0 && (!truncates_exactly(p) || extra_bits < 0 || extra_bits > 12))
    throw Error(ErrorCode::invalid_argument, "rsqrt of a value with " + std::to_string(extra_bits) +
                                                 " extra fraction bits: needs exact truncation and at most 12");
  const int X = extra_bits;
  {
    // octaves.cppm: 1/sqrt(x) g in 3 rounds (rss3 dcf; on the circuit
    // msb_bits + bit_dot), `then` of m meanwhile, and the rows' product.
    const int S = m ? f + E : f;
    const auto plan = detail::octave_plan(octave_rsqrt, f + X, rsqrt_min_log2, rsqrt_max_log2, output_scale, S);
    if (detail::octave_power_pays(p, x, plan)) {
      if (!m) co_return co_await then(p, co_await detail::octave_power(p, x, plan, octave_rsqrt, output_scale, S));
      P pr = p.fork(), pt = p.fork();
      auto [factor, outputs] =
          co_await when_all(detail::octave_power(pr, x, plan, octave_rsqrt, output_scale, S), then(pt, *m));
      co_return co_await detail::rows_times(p, outputs, factor, true, S);
    }
  }
  std::vector<Ring> scale(width), slope(width), correction(width);
  for (int t = 0; t < width; ++t) {
    scale[t] = Ring{1} << (K - t);
    slope[t] = static_cast<Ring>(std::llround(-rsqrt_guess_b * std::exp2(K - t + rsqrt_slope_guard_bits)));
    correction[t] =
        static_cast<Ring>(std::llround(output_scale * std::exp2(-(t - f + 1) / 2.0) * std::exp2(f + E)));
  }
  // x', -b x' (the series' guess; the polynomial needs none) and g from
  // the highest bit's one-hot.
  const bool polynomial = truncates_exactly(p);
  auto slope_times = [&](P& q, auto weight_of) -> Task<Share> {
    if (polynomial) co_return Share{};
    co_return co_await weight_of(q, slope, K - f + 1 + rsqrt_slope_guard_bits + X);
  };
  auto normalised = [&]() -> Task<std::tuple<Share, Share, Share>> {
    if constexpr (detail::ArithmeticOneHot<P>) {
      // A ring 0/1 one-hot: g is local, x' and -b x' one dot_trunc each.
      if (detail::arithmetic_one_hot_pays(p, width, x)) {
        const auto one_hot = co_await detail::highest_bit_arith(p, x, width, X);
        auto weight_of = [&](P& q, const std::vector<Ring>& w, int bits) {
          return detail::times_weight_of_arith(q, one_hot, x, w, bits);
        };
        P px = p.fork(), pb = p.fork();
        auto [xn, minus_bx] = co_await when_all(weight_of(px, scale, K - f + 1 + X), slope_times(pb, weight_of));
        co_return std::tuple{std::move(xn), std::move(minus_bx), detail::weighted_bits<P>(one_hot, correction)};
      }
    }
    // Bits: x' and -b x' straight from them (bit_dot: B2A fused with the
    // products), g by B2A meanwhile.
    const auto one_hot = co_await detail::highest_bit_bits(p, x, width, X);
    auto weight_of = [&](P& q, const std::vector<Ring>& w, int bits) {
      return detail::times_weight_of(q, one_hot, x, w, bits);
    };
    P px = p.fork(), pb = p.fork(), pc = p.fork();
    auto correction_of = [&](P& q) -> Task<Share> {
      co_return detail::weighted_bits<P>(co_await q.bit_to_arith(one_hot), correction);
    };
    auto [xn, minus_bx, g] =
        co_await when_all(weight_of(px, scale, K - f + 1 + X), slope_times(pb, weight_of), correction_of(pc));
    co_return std::tuple{std::move(xn), std::move(minus_bx), std::move(g)};
  };
  auto [xn, minus_bx, g] = co_await normalised();
  if (polynomial) co_return co_await detail::rsqrt_polynomial_then(p, xn, g, m, then);
  // y0 = a - b x'.
  const Share y0 = p.add_public(minus_bx, ring_filled(shape, fp.encode(rsqrt_guess_a)));
  P py = p.fork(), pg = p.fork();
  auto [y0_sq, y0g] = co_await when_all(py.mul_trunc(y0, y0), pg.mul_trunc(y0, g));  // y0 g at 2^(f+E)
  // m y0 g, formed while e is computed; then `then` of it while 3e^2/4 is.
  auto factor = [&](P& q) -> Task<Share> {
    if (!m) co_return y0g;
    co_return co_await q.mul_trunc(*m, broadcast_last<P>(y0g, P::shape(*m).back()), f + E + F);  // at 2^(f-F)
  };
  auto error = [&](P& q) -> Task<Share> {
    auto xy2 = co_await q.mul_trunc(xn, y0_sq);
    co_return q.add_public(q.neg(xy2), ring_filled(shape, fp.encode(1.0)));
  };
  P pm = p.fork(), pe = p.fork();
  auto [scaled, e] = co_await when_all(factor(pm), error(pe));
  // 2 + e + 3e^2/4 = 2 + e (4 + 3e) / 4, at 2^(f-R) when it scales rows of
  // m (a norm's projections): their products then stay 2^R times further
  // from truncation's failure range, for a 2^-(f-R+1) relative rounding.
  // 1/sqrt(x) alone keeps the series at 2^f (its values reach 32).
  const int R = m ? rsqrt_series_shift : 0;
  auto series_of = [&](P& q) -> Task<Share> {
    const auto four_plus_3e = q.add_public(q.mul_public(e, ring_filled(shape, 3)), ring_filled(shape, fp.encode(4.0)));
    auto tail = co_await q.mul_trunc(e, four_plus_3e, f + 2 + R);
    co_return q.add_public(tail, ring_filled(shape, Ring{2} << (f - R)));
  };
  P pt = p.fork(), ps = p.fork();
  auto [outputs, series] = co_await when_all(then(pt, scaled), series_of(ps));
  co_return co_await detail::rows_times(p, outputs, series, m.has_value(), (m ? f - F : f + E) + 1 - R);
}

// m * broadcast(1/sqrt(x)): x (..., 1), m (..., d); without m, 1/sqrt(x).
// extra_bits and output_scale as rsqrt_then's.
template <Protocol P>
Task<typename P::Share> rsqrt_times(P& p, const typename P::Share& x, const std::optional<typename P::Share>& m,
                                    int extra_bits = 0, double output_scale = 1.0) {
  using Share = typename P::Share;
  if constexpr (ExactReals<P>) {
    auto inv = p.map_real(x, [](double v) { return 1.0 / std::sqrt(v); });
    if (!m) co_return inv;
    co_return co_await p.mul_trunc(*m, broadcast_last<P>(inv, P::shape(*m).back()));
  } else {
    auto itself = [](P&, const Share& v) -> Task<std::vector<Share>> { co_return std::vector<Share>{v}; };
    auto out = co_await rsqrt_then(p, x, m, itself, extra_bits, output_scale);
    co_return std::move(out.front());
  }
}

template <Protocol P>
Task<typename P::Share> rsqrt(P& p, const typename P::Share& x) {
  co_return co_await rsqrt_times(p, x, std::nullopt);
}

}  // namespace mpcache::ops
