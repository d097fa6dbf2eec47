// exp for non-positive inputs (softmax after max subtraction), 0 below -14
// (exp(-14) < 1e-6). Two ways, by the backend's truncation:
//   probabilistic (PUMA-style): (1 + x/2^8)^(2^8) by 8 squarings. Every
//     value stays near 2^(2f) before its truncation, where the failure
//     probability (|x|/2^64 per element) is about 2^-27.
//   exact (truncates_exactly): p(z)^2 with z = x/8 + 1, which maps [-14, 0]
//     into [-0.75, 1], and p the degree-8 interpolant of exp(4z - 4) at
//     Chebyshev nodes of that interval (monomial coefficients below 0.21,
//     so z's powers at f fraction bits lose nothing that counts):
//       round 1: z^2 = (x + 8)^2 / 64 (x + 8 = 8z is local: the 1/8s
//                ride the products' truncations, x is never truncated);
//       round 2: z^3 and z^4;
//       round 3: z^4 (sum_{k>4} c_k z^(k-4)) + the low half
//                sum_{k<=4} c_k z^k, one sum of products (dot_trunc,
//                where the backend has it: the low half's truncation
//                rides the product's; else a truncation beside it);
//       round 4: the square.
//     Four rounds where the squarings took nine. The product of round 3
//     reaches 2^(3f - 1.5) before its truncation, safe only where truncation
//     is exact; a backend whose fraction bits leave too little room (f > 24)
//     takes the squarings.
// The clipping comparison runs concurrently, then one select. It reads x
// to 1/16 (ops::below_coarse, 50 bits at f = 18: 12.3 bytes per element
// on rss3's circuit where 64 take 15.6): every x < -14 is clipped, none
// >= -13.875, and those between may be either (exp(-13.875) < 1e-6).
// Where comparisons are cheap one-round DCFs as well (rss3 dcf,
// detail::splines_pay), a spline of five degree-4 pieces on [-14, -8, -5,
// -3, -1.5, 0] and 0 below -14 (least squares on Chebyshev nodes) by
// piecewise: the breakpoints' comparisons (the clip among them) run while
// each piece takes 2 product rounds, then one select.
//   range: x <= 0 (fixed point, 18 fraction bits)
//   error: |exp_neg(x) - exp(x)| <= 2.5e-3 on [-14, 0], <= 1e-6 below
//     (tested; the exact way's own error is about 1.1e-4, the spline's
//     6.4e-5, the squarings' 1.2e-3)
//   cost (rss3, tested): probabilistic 10 rounds = max(truncate + 8
//     squarings, comparison) + select; exact, with truncation pairs and
//     dcf comparisons, the spline: 3 = max(2, msb_arith 2) + select (the
//     polynomial took 5 = max(4, comparison: 2) + select)
export module mpcache.ops:exp;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;
import :piecewise;

export namespace mpcache::ops {

inline constexpr int exp_squarings = 8;
inline constexpr double exp_clip_below = -14.0;

// p's coefficients c_0..c_8 (exact way): exp(x) ~ p(x/8 + 1)^2 on [-14, 0].
inline constexpr std::array<double, 9> exp_polynomial = {
    0.018345756295732218, 0.073183446355404552, 0.14487676818420217,
    0.19663288352640348,  0.20931127477443615,  0.14929777670985764,
    0.065614570500848748, 0.076293173253452834, 0.066395745720454008};

// The spline (dcf comparisons, exact truncation): exp on [-14, 0], the
// last piece (fitted on [-1.5, 0]) taking x >= -1.5.
inline const Piecewise& exp_spline_spec() {
  using K = Piece::Kind;
  static const Piecewise spec{
      {-14.0, -8.0, -5.0, -3.0, -1.5},
      {Piece{K::zero, 0, 1, {}},
       Piece{K::polynomial, -11.0, 3.0,
             {1.73994655795876e-05, 3.58789052550864e-05, 6.29581776828457e-05, 0.000128236143617556,
              8.7037287912951e-05}},
       Piece{K::polynomial, -6.5, 1.5,
             {0.00150423644519845, 0.00222311776259032, 0.00167712823492346, 0.000971511738291163,
              0.000354526988878476}},
       Piece{K::polynomial, -4.0, 1.0,
             {0.0183164590385011, 0.0182663269329375, 0.00914310750874082, 0.00324823092516845,
              0.000802113689020038}},
       Piece{K::polynomial, -2.25, 0.75,
             {0.105400053173182, 0.0789830516402675, 0.0296286458750191, 0.00767511442722801,
              0.00142908244518625}},
       Piece{K::polynomial, -0.75, 0.75,
             {0.472370266319293, 0.353977479278135, 0.13278637838703, 0.0343974764421002,
              0.00640470317516616}}}};
  return spec;
}

namespace detail {
template <Protocol P>
Task<typename P::Share> exp_by_squaring(P& p, const typename P::Share& x) {
  const Shape s = P::shape(x);
  auto y = co_await p.truncate(x, exp_squarings);  // x / 256
  y = p.add_public(y, ring_filled(s, Ring{1} << p.frac_bits()));
  for (int i = 0; i < exp_squarings; ++i) y = co_await p.mul_trunc(y, y);
  co_return y;
}

// Bits the exact way's coefficients carry: the product of round 3 reaches
// 0.36 2^(2f + G), kept below 2^56; 0 where that leaves fewer than 8.
inline int exp_coefficient_bits(int frac_bits) {
  const int bits = std::min(frac_bits, 56 - 2 * frac_bits);
  return bits >= 8 ? bits : 0;
}

// p(x/8 + 1)^2 (see the top of this file); needs exact truncation.
template <Protocol P>
Task<typename P::Share> exp_by_polynomial(P& p, const typename P::Share& x, int bits) {
  using Share = typename P::Share;
  const int f = p.frac_bits();
  const Shape s = P::shape(x);
  const FixedPoint fp(f);
  // w = x + 8 = 8z, local; the products' truncations take the 1/8s, so x
  // itself is never truncated: z^2 = w^2 / 64, z^3 = w z^2 / 8, z^4.
  // (Each temporary is dropped as soon as it is used: over a prefill's
  // scores they are most of the working set.)
  Share low_sum, high_factor, z4;
  {
    Share w = p.add_public(x, ring_filled(s, fp.encode(8.0)));
    Share z2 = co_await p.mul_trunc(w, w, f + 6);
    P pc = p.fork(), pd = p.fork();
    auto [z3, z_4] = co_await when_all(pc.mul_trunc(w, z2, f + 3), pd.mul_trunc(z2, z2));
    z4 = std::move(z_4);
    std::vector<Share> powers;
    powers.reserve(4);
    powers.push_back(std::move(w));
    powers.push_back(std::move(z2));
    powers.push_back(std::move(z3));
    powers.push_back(z4);
    const auto& c = exp_polynomial;
    const std::array<double, 4> low{c[1] / 8, c[2], c[3], c[4]}, high{c[5] / 8, c[6], c[7], c[8]};
    low_sum = weighted_terms<P>(p, powers, low, bits);        // at 2^(f + bits)
    high_factor = weighted_terms<P>(p, powers, high, bits);  // at 2^(f + bits)
  }
  Share sum;
  if constexpr (SumsProducts<P>) {
    // z^4 (its factor) + (the low half) 1 as one sum of products: the low
    // half's truncation rides the product's.
    Shape column = s;
    column.push_back(1);
    Share a = concat_last<P>(reshape<P>(std::exchange(z4, Share{}), column), reshape<P>(low_sum, column));
    Share b = concat_last<P>(reshape<P>(std::exchange(high_factor, Share{}), column),
                             public_share(p, reshape<P>(std::exchange(low_sum, Share{}), column),
                                          ring_filled(column, Ring{1} << f)));
    sum = co_await p.dot_trunc(a, b, f + bits);
  } else {
    P ph = p.fork();
    auto [lo, hi] = co_await when_all(p.truncate(low_sum, bits), ph.mul_trunc(z4, high_factor, f + bits));
    sum = p.add(lo, hi);
  }
  const auto root = p.add_public(sum, ring_filled(s, fp.encode(exp_polynomial[0])));
  co_return co_await p.mul_trunc(root, root);
}

template <Protocol P>
Task<typename P::Share> exp_unclipped(P& p, const typename P::Share& x) {
  const int bits = exp_coefficient_bits(p.frac_bits());
  if (truncates_exactly(p) && bits > 0) co_return co_await exp_by_polynomial(p, x, bits);
  co_return co_await exp_by_squaring(p, x);
}
}  // namespace detail

template <Protocol P>
Task<typename P::Share> exp_neg(P& p, const typename P::Share& x) {
  if constexpr (ExactReals<P>) co_return p.map_real(x, [](double v) { return std::exp(v); });
  if (detail::splines_pay(p, x)) co_return co_await piecewise(p, x, exp_spline_spec());
  // The clip reads x to 1/16 (below_coarse): 0 below -14, exp's
  // approximation from -13.875, either between.
  P pe = p.fork(), pc = p.fork();  // the products' fork first (see exp_by_polynomial)
  const int drop = std::max(0, p.frac_bits() - 4);
  auto [y, below] = co_await when_all(detail::exp_unclipped(pe, x), below_coarse(pc, x, exp_clip_below, drop));
  co_return p.sub(y, co_await p.mul(below, y));  // below ? 0 : y
}

}  // namespace mpcache::ops
