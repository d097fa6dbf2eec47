// LayerNorm and RMSNorm over the last axis (d), with secret gamma (and beta).
//   layer_norm: y = (x - mean) rsqrt(var + eps) gamma + beta
//   rms_norm:   y = x rsqrt(mean(x^2) + eps) gamma
// Range: rows whose variance (mean square) + eps lies in [2^-10, 2^14].
// Error: <= 2e-3 relative to the normalised scale (tested against float64).
module;
#include "prelude.hpp"
export module mpcache.ops:norm;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :rsqrt;

export namespace mpcache::ops {

namespace detail {
// (..., d) -> (..., 1): sum over the last axis times 1/d, truncated.
template <Protocol P>
Task<typename P::Share> mean_last(P& p, const typename P::Share& x) {
  const Shape s = P::shape(x);
  const FixedPoint fp(p.frac_bits());
  const auto sum = sum_last<P>(x);
  if constexpr (NativeReal<P>) {  // exact 1/d instead of its fixed-point code
    const double inv = 1.0 / static_cast<double>(s.back());
    co_return p.map_real(sum, [inv](double v) { return v * inv; });
  }
  co_return co_await p.truncate(
      p.mul_public(sum, ring_filled(P::shape(sum), fp.encode(1.0 / static_cast<double>(s.back())))),
      p.frac_bits());
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

template <Protocol P>
Task<typename P::Share> layer_norm(P& p, const typename P::Share& x, const typename P::Share& gamma,
                                   const typename P::Share& beta, double eps = 1e-5) {
  const std::size_t d = P::shape(x).back();
  auto mean = co_await detail::mean_last(p, x);
  auto centered = p.sub(x, broadcast_last<P>(mean, d));
  auto var = co_await detail::mean_last(p, co_await p.mul_trunc(centered, centered));
  var = add_constant(p, var, eps);
  auto inv = co_await rsqrt(p, var);
  auto normed = co_await p.mul_trunc(centered, broadcast_last<P>(inv, d));
  const Shape lead = detail::leading_shape<P>(x);
  co_return p.add(co_await p.mul_trunc(normed, detail::rows_of<P>(gamma, lead)),
                  detail::rows_of<P>(beta, lead));
}

template <Protocol P>
Task<typename P::Share> rms_norm(P& p, const typename P::Share& x, const typename P::Share& gamma,
                                 double eps = 1e-5) {
  const std::size_t d = P::shape(x).back();
  auto ms = co_await detail::mean_last(p, co_await p.mul_trunc(x, x));
  ms = add_constant(p, ms, eps);
  auto inv = co_await rsqrt(p, ms);
  auto normed = co_await p.mul_trunc(x, broadcast_last<P>(inv, d));
  co_return co_await p.mul_trunc(normed, detail::rows_of<P>(gamma, detail::leading_shape<P>(x)));
}

}  // namespace mpcache::ops
