// 1/x for positive x. Where truncation is exact and
// detail::octave_power_pays (rss3 dcf, or few values on the circuit), by
// octave pieces (octaves.cppm: 3 rounds with dcf, range x >= 1/8).
// Otherwise by normalisation and a factored Newton series (as
// SPU/PUMA normalise; the series replaces their sequential Newton steps):
//   1. comparisons x < 2^t for every t < w in one batch give the highest
//      set bit p; w = f + max_log2 covers x < 2^max_log2;
//   2. that one-hot (w bits) gives s = 2^(K-p) as a local weighted sum
//      after B2A, and meanwhile x s as a bit_dot of the bits with x 2^(K-t)
//      (B2A fused with the product: the round a product after B2A took);
//   3. x' = x s / 2^(K-f+1) lies in [0.5, 1); y0 = 2.9142 - 2x', so that
//      e = 1 - x' y0 lies in [-0.062, 0.086];
//   4. 1/x' = y0 / (1 - e) = y0 (1 + e)(1 + e^2) up to a relative e^4
//      < 5.5e-5, and 1/x = 1/x' s / 2^(K-f+1): z0 = y0 s and e in one
//      round, z0 (1 + e) and e^2 in the next, then (1 + e^2). Three Newton
//      steps took six rounds for the same accuracy.
//   range: 1/8 <= x < 2^max_log2, max_log2 <= 23 (K = 40, f = 18); below 1/8
//     the product y0 s exceeds 2^44 and truncation's failure probability
//     (2^(l-64)) grows past 2^-20
//   error: relative <= 2e-4 + 2^-f/x (tested on dense samples of the range)
//   cost (rss3): comparisons (msb_bits of w + 1 bits: 5 at w = 41 and at
//     w <= 31, 4 at w = 22) + x' (bit_dot, 2) + 3 = 10 rounds (tested)
//   where the backend has an arithmetic sign and dot_trunc and its cost
//     model says so (rss3 dcf): the one-hot comes from msb_arith as a ring
//     0/1, s is local and x' one dot_trunc (1 round), so 2 + 1 + 3 = 6
export module mpcache.ops:reciprocal;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;
import :octaves;

export namespace mpcache::ops {

inline constexpr int reciprocal_scale_bits = 40;    // K
inline constexpr int reciprocal_max_log2 = 23;      // default range: x < 2^23
inline constexpr int reciprocal_min_log2 = -3;      // and x >= 1/8
inline constexpr int reciprocal_guard_bits = 4;     // z carried at 2^(f+4)
inline constexpr double reciprocal_guess = 2.9142;  // y0 = 2.9142 - 2x' (step 3 above)

namespace detail {
// The thresholds 2^(low_bits + t) (t < w) of a highest-bit search over
// `width` bits above the lowest `low_bits` (a value that carries low_bits
// extra fraction bits: its position t is the unshifted value's).
inline std::vector<Ring> highest_bit_thresholds(int width, int low_bits = 0) {
  if (width < 2 || width > reciprocal_scale_bits + 1)
    throw Error(ErrorCode::invalid_argument, "highest set bit over " + std::to_string(width) +
                                                 " bits, outside [2, " +
                                                 std::to_string(reciprocal_scale_bits + 1) + "]");
  if (low_bits < 0 || width + low_bits > 60)
    throw Error(ErrorCode::invalid_argument, "highest set bit over " + std::to_string(width) + " bits above " +
                                                 std::to_string(low_bits) + ": more than 60 bits");
  std::vector<Ring> powers(static_cast<std::size_t>(width));
  for (std::size_t t = 0; t < powers.size(); ++t) powers[t] = Ring{1} << (t + static_cast<std::size_t>(low_bits));
  return powers;
}

// One-hot (boolean bits, shape (..., w)) of the highest set bit p of
// 0 < x < 2^w (as a ring integer): below_t = [x < 2^t] for every t in one
// batched A2B of x - 2^t (w + 1 bits, since |x - 2^t| < 2^w), then
// one_hot_t = below_{t+1} xor below_t (below_w = 1) locally. Any public
// function g(p) is a local weighted sum of these bits after one B2A, and
// x g(p) one bit_dot (times_weight_of).
// msb_bits' rounds: 5 for w = 41 and w <= 31. An A2B of x
// and a prefix-OR from its top bit take ceil(log2 w) rounds more; the
// comparisons cost w A2Bs per element instead of one, cheap where x is one
// value per row (norms, softmax sums).
template <Protocol P>
Task<typename P::Bits> highest_bit_bits(P& p, const typename P::Share& x, int width, int low_bits = 0) {
  const auto powers = highest_bit_thresholds(width, low_bits);
  const auto below = co_await below_each_bits(p, x, powers, width + low_bits + 1);
  const auto hot = adjacent_combined<P>(below, powers.size(), [](Ring above, Ring at) { return above ^ at; });
  co_return p.bits_xor_public(hot, top_is_one(P::shape(below), powers.size()));
}

// x (...) repeated on a new last axis (..., w), times weights[t].
template <Protocol P>
typename P::Share weighted_copies(const P& p, const typename P::Share& x, const std::vector<Ring>& weights) {
  return p.mul_public(repeat_last<P>(x, weights.size()), tiled_last(P::shape(x), weights));
}

// x (...) times weights[p] for the highest bit p marked in one_hot (..., w),
// truncated by `bits`: one bit_dot (2 rounds) of the bits with x weights[t].
// (The other bits' terms may wrap; their exact 0 removes them.)
template <Protocol P>
Task<typename P::Share> times_weight_of(P& p, const typename P::Bits& one_hot, const typename P::Share& x,
                                        const std::vector<Ring>& weights, int bits) {
  co_return reshape<P>(co_await p.bit_dot(one_hot, weighted_copies(p, x, weights), bits), P::shape(x));
}

template <Protocol P>
typename P::Share weighted_bits(const typename P::Share& one_hot, const std::vector<Ring>& weights) {
  return P::apply(one_hot, [&](const RingTensor& t) { return ring_weighted_sum_last(t, weights); });
}

// Whether the highest-bit search of `values` values over `width` bits
// (width comparisons each, over width + 1 bits) should end in an arithmetic
// one-hot (arithmetic_select_pays).
template <CostModel C>
bool arithmetic_one_hot_pays(int width, std::size_t values) {
  const auto w = static_cast<std::size_t>(width);
  return arithmetic_select_pays<C>(width + 1, values * w, values, w);
}

template <ArithmeticOneHot P>
bool arithmetic_one_hot_pays(const P& p, int width, const typename P::Share& x) {
  const std::size_t values = element_count(P::shape(x));
  const auto w = static_cast<std::size_t>(width);
  return arithmetic_select_pays(p, width + 1, values * w, values, w);
}

// highest_bit_bits' one-hot as an arithmetic 0/1 (..., w): below_t by
// msb_arith, one_hot_t = below_{t+1} - below_t (below_w = 1), locally.
template <ArithmeticOneHot P>
Task<typename P::Share> highest_bit_arith(P& p, const typename P::Share& x, int width, int low_bits = 0) {
  const auto powers = highest_bit_thresholds(width, low_bits);
  const auto below = co_await below_each(p, x, powers, width + low_bits + 1);
  const auto hot = adjacent_combined<P>(below, powers.size(), [](Ring above, Ring at) { return above - at; });
  co_return p.add_public(hot, top_is_one(P::shape(below), powers.size()));
}

// times_weight_of for an arithmetic one-hot: one dot_trunc (1 round).
template <ArithmeticOneHot P>
Task<typename P::Share> times_weight_of_arith(P& p, const typename P::Share& one_hot, const typename P::Share& x,
                                              const std::vector<Ring>& weights, int bits) {
  co_return reshape<P>(co_await p.dot_trunc(one_hot, weighted_copies(p, x, weights), bits), P::shape(x));
}

// Each of `outputs` times `factor` (..., 1), broadcast over its rows'
// last axis when `rows`, truncated by `bits`: one round.
template <Protocol P>
Task<std::vector<typename P::Share>> rows_times(P& p, const std::vector<typename P::Share>& outputs,
                                                const typename P::Share& factor, bool rows, int bits) {
  using Share = typename P::Share;
  // The row factors must outlive the tasks, which start inside when_all.
  std::vector<Share> row_factors;
  for (const Share& o : outputs) row_factors.push_back(rows ? broadcast_last<P>(factor, P::shape(o).back()) : factor);
  std::vector<P> forks;
  std::vector<Task<Share>> products;
  for (std::size_t i = 0; i < outputs.size(); ++i) forks.push_back(p.fork());
  for (std::size_t i = 0; i < outputs.size(); ++i) products.push_back(forks[i].mul_trunc(outputs[i], row_factors[i], bits));
  co_return co_await when_all(std::move(products));
}

// Bits of a fixed-point value below 2^max_log2 (real).
inline int value_width(int frac_bits, int max_log2) { return frac_bits + max_log2; }

// s = 2^(K - p) for the highest set bit p of 0 < x < 2^width, as public weights.
inline std::vector<Ring> normaliser_weights(int width) {
  std::vector<Ring> weights(static_cast<std::size_t>(width));
  for (int t = 0; t < width; ++t) weights[t] = Ring{1} << (reciprocal_scale_bits - t);
  return weights;
}
}  // namespace detail

template <Protocol P>
Task<typename P::Share> reciprocal(P& p, const typename P::Share& x, int max_log2 = reciprocal_max_log2) {
  if constexpr (ExactReals<P>) co_return p.map_real(x, [](double v) { return 1.0 / v; });
  constexpr int K = reciprocal_scale_bits, G = reciprocal_guard_bits;
  const int f = p.frac_bits();
  {  // octaves.cppm: 3 rounds (rss3 dcf), or msb_bits + bit_dot
    const auto plan = detail::octave_plan(octave_reciprocal, f, reciprocal_min_log2, max_log2, 1.0, f);
    if (detail::octave_power_pays(p, x, plan)) co_return co_await detail::octave_power(p, x, plan, octave_reciprocal, 1.0, f);
  }
  const Shape shape = P::shape(x);
  const FixedPoint fp(f);
  const int width = detail::value_width(f, max_log2);
  const auto weights = detail::normaliser_weights(width);
  // s = 2^(K-p) and x' = x s / 2^(K-f+1), in [0.5, 1).
  auto normalised = [&]() -> Task<std::pair<typename P::Share, typename P::Share>> {
    if constexpr (detail::ArithmeticOneHot<P>) {
      if (detail::arithmetic_one_hot_pays(p, width, x)) {
        const auto hot = co_await detail::highest_bit_arith(p, x, width);
        co_return std::pair{detail::weighted_bits<P>(hot, weights),
                            co_await detail::times_weight_of_arith(p, hot, x, weights, K - f + 1)};
      }
    }
    const auto hot = co_await detail::highest_bit_bits(p, x, width);
    // s (B2A, for z0 below) while x' is formed.
    auto normaliser = [&](P& q) -> Task<typename P::Share> {
      co_return detail::weighted_bits<P>(co_await q.bit_to_arith(hot), weights);
    };
    P pn = p.fork(), px = p.fork();
    auto [s, xn] = co_await when_all(normaliser(pn), detail::times_weight_of(px, hot, x, weights, K - f + 1));
    co_return std::pair{std::move(s), std::move(xn)};
  };
  auto [s, xn] = co_await normalised();
  auto y0 = p.add_public(p.neg(p.add(xn, xn)), ring_filled(shape, fp.encode(reciprocal_guess)));
  const RingTensor one = ring_filled(shape, fp.encode(1.0));
  // e = 1 - x' y0 and z0 = y0 s (the unrefined 1/x at scale 2^(f+G)).
  P pe = p.fork(), pz = p.fork();
  auto [xy, z0] = co_await when_all(pe.mul_trunc(xn, y0), pz.mul_trunc(y0, s, K - f + 1 - G));
  auto e = p.add_public(p.neg(xy), one);
  P pe2 = p.fork(), pz1 = p.fork();
  auto [e2, z1] = co_await when_all(pe2.mul_trunc(e, e), pz1.mul_trunc(z0, p.add_public(e, one)));
  co_return co_await p.mul_trunc(z1, p.add_public(e2, one), f + G);
}

// m_i / x for the multiplicands m_i (..., d_i) that `make(q)` returns and
// positive x (..., 1): reciprocal's range and relative error, tested on
// softmax sums (x in [1, 2^11)); its dcf path carries m_i s without z0's
// guard bits, which only larger x would need.
// `make` runs while the highest bit of x is found. Where the one-hot is
// arithmetic (rss3 dcf), s is known a round before x', so each m_i is
// carried through the products of z instead of z0: m_i s beside x', then
// m_i s y0 beside e, m_i s y0 (1 + e) beside e^2, and (1 + e^2) last: the
// products with the m_i add no round to the reciprocal's 6 (under
// probabilistic truncation: exact truncation takes the octave pieces, then
// one product). Elsewhere, 1/x
// then one product.
template <Protocol P, class Make>
Task<std::vector<typename P::Share>> reciprocal_then(P& p, const typename P::Share& x, Make make,
                                                     int max_log2 = reciprocal_max_log2) {
  using Share = typename P::Share;
  const int f = p.frac_bits();
  if constexpr (!ExactReals<P>) {
    // 1/x at 2^(f+G) by octave pieces (3 rounds on rss3 dcf) while make
    // runs, then the products: 4 rounds.
    const int S = f + reciprocal_guard_bits;
    const auto plan = detail::octave_plan(octave_reciprocal, f, reciprocal_min_log2, max_log2, 1.0, S);
    if (detail::octave_power_pays(p, x, plan)) {
      P pi = p.fork(), pm = p.fork();
      auto [inverse, ms] =
          co_await when_all(detail::octave_power(pi, x, plan, octave_reciprocal, 1.0, S), make(pm));
      co_return co_await detail::rows_times(p, ms, inverse, true, S);
    }
  }
  if constexpr (detail::ArithmeticOneHot<P> && !ExactReals<P>) {
    const int width = detail::value_width(f, max_log2);
    if (detail::arithmetic_one_hot_pays(p, width, x)) {
      constexpr int K = reciprocal_scale_bits, G = reciprocal_guard_bits;
      const Shape shape = P::shape(x);
      const FixedPoint fp(f);
      const RingTensor one = ring_filled(shape, fp.encode(1.0));
      const auto weights = detail::normaliser_weights(width);
      P pb = p.fork(), pm = p.fork();
      auto [hot, ms] = co_await when_all(detail::highest_bit_arith(pb, x, width), make(pm));
      const Share s = detail::weighted_bits<P>(hot, weights);
      // x' and m_i s / 2^(K-f+1) (m_i / x times x', at 2^(f+G)).
      P px = p.fork(), ps = p.fork();
      auto [xn, scaled] = co_await when_all(detail::times_weight_of_arith(px, hot, x, weights, K - f + 1),
                                            detail::rows_times(ps, ms, s, true, K - f + 1 - G));
      const Share y0 = p.add_public(p.neg(p.add(xn, xn)), ring_filled(shape, fp.encode(reciprocal_guess)));
      P pe = p.fork(), py = p.fork();
      auto [xy, times_y0] = co_await when_all(pe.mul_trunc(xn, y0), detail::rows_times(py, scaled, y0, true, f));
      const Share e = p.add_public(p.neg(xy), one);
      P pe2 = p.fork(), p1 = p.fork();
      auto [e2, times_1e] =
          co_await when_all(pe2.mul_trunc(e, e), detail::rows_times(p1, times_y0, p.add_public(e, one), true, f));
      co_return co_await detail::rows_times(p, times_1e, p.add_public(e2, one), true, f + G);
    }
  }
  P pi = p.fork(), pm = p.fork();
  auto [inverse, ms] = co_await when_all(reciprocal(pi, x, max_log2), make(pm));
  if constexpr (ExactReals<P>) {
    std::vector<Share> out;
    for (const Share& m : ms) out.push_back(co_await p.mul_trunc(m, broadcast_last<P>(inverse, P::shape(m).back())));
    co_return out;
  } else {
    co_return co_await detail::rows_times(p, ms, inverse, true, f);
  }
}

}  // namespace mpcache::ops
