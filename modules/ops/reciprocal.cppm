// 1/x for positive x by normalisation and Newton's method (as SPU/PUMA):
//   1. A2B of x and a prefix-OR from the top give the highest set bit p;
//   2. B2A of that one-hot word bit by bit (K+1 bits, one batch) gives
//      s = 2^(K-p) as a local weighted sum;
//   3. x' = x s / 2^(K-f+1) lies in [0.5, 1); y0 = 2.9142 - 2x';
//   4. three Newton steps y <- y (2 - x' y); 1/x = y s / 2^(K-f+1).
//   range: 1/8 <= x < 2^(K+1-f) with K = 40 (x < 2^23 at f = 18); below 1/8
//     the last product y s exceeds 2^44 and truncation's failure
//     probability (2^(l-64)) grows past 2^-20
//   error: relative <= 2e-4 + 2^-f/x (tested on dense samples of the range)
//   cost (rss3): A2B 8 + prefix-OR 6 + B2A 2 + 1 + Newton 6 + 1 = 24 rounds (tested)
module;
#include "prelude.hpp"
export module mpcache.ops:reciprocal;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;

export namespace mpcache::ops {

inline constexpr int reciprocal_scale_bits = 40;  // K
inline constexpr int reciprocal_newton_steps = 3;

namespace detail {
// One-hot (arithmetic 0/1, shape (..., K+1)) of the highest set bit p of x > 0
// (p <= K): A2B of K+1 bits, prefix-OR from the top, one B2A batch. Any
// public function g(p) is then a local weighted sum of these bits.
template <Protocol P>
Task<typename P::Share> highest_bit_one_hot(P& p, const typename P::Share& x) {
  constexpr int K = reciprocal_scale_bits;
  auto bits = co_await p.to_bits(x, K + 1);
  // Prefix-OR from the top: afterwards every bit at or below p is set.
  for (int s = 1; s <= K; s *= 2) {
    auto shifted = p.bits_shift_right(bits, s);
    auto both = co_await p.bits_and(bits, shifted);
    bits = p.bits_xor(p.bits_xor(bits, shifted), both);  // a | b
  }
  auto top = p.bits_xor(bits, p.bits_shift_right(bits, 1));  // only bit p
  auto spread = P::apply(top, [](const RingTensor& t) { return ring_bits_to_axis(t, K + 1); });
  co_return co_await p.bit_to_arith(spread);
}

template <Protocol P>
typename P::Share weighted_bits(const typename P::Share& one_hot, const std::vector<Ring>& weights) {
  return P::apply(one_hot, [&](const RingTensor& t) { return ring_weighted_sum_last(t, weights); });
}

// s = 2^(K - p) (integer).
template <Protocol P>
Task<typename P::Share> normaliser(P& p, const typename P::Share& x) {
  constexpr int K = reciprocal_scale_bits;
  auto one_hot = co_await highest_bit_one_hot(p, x);
  std::vector<Ring> weights(K + 1);
  for (int t = 0; t <= K; ++t) weights[t] = Ring{1} << (K - t);
  co_return weighted_bits<P>(one_hot, weights);
}
}  // namespace detail

template <Protocol P>
Task<typename P::Share> reciprocal(P& p, const typename P::Share& x) {
  if constexpr (NativeReal<P>) co_return p.map_real(x, [](double v) { return 1.0 / v; });
  constexpr int K = reciprocal_scale_bits;
  const int f = p.frac_bits();
  const Shape shape = P::shape(x);
  const FixedPoint fp(f);
  auto s = co_await detail::normaliser(p, x);
  auto xn = co_await p.mul_trunc(x, s, K - f + 1);  // in [0.5, 1)
  // y0 = 2.9142 - 2 x': relative error at most 0.0858 on [0.5, 1).
  auto y = p.add_public(p.neg(p.add(xn, xn)), ring_filled(shape, fp.encode(2.9142)));
  const RingTensor two = ring_filled(shape, fp.encode(2.0));
  for (int i = 0; i < reciprocal_newton_steps; ++i) {
    auto xy = co_await p.mul_trunc(xn, y);
    y = co_await p.mul_trunc(y, p.add_public(p.neg(xy), two));
  }
  co_return co_await p.mul_trunc(y, s, K - f + 1);
}

}  // namespace mpcache::ops
