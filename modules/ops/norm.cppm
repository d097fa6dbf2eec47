// LayerNorm and RMSNorm over the last axis (d), with secret gamma (and beta).
//   layer_norm: y = (x - mean) rsqrt(var + eps) gamma + beta
//   rms_norm:   y = x rsqrt(mean(x^2) + eps) gamma
// Range: rows whose variance + eps lies in [2^-10, 2^14] (LayerNorm), whose
// mean square + eps lies in [2^-10, 2^13] (RMSNorm).
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

// Critical path (rss3): x^2 (truncated by f + b, 2^b <= d < 2^(b+1), so no
// separate mean), rsqrt, one product: 29 rounds. gamma's public correction
// sqrt(d / 2^b) and the product x * gamma run concurrently with the rsqrt.
// Range: mean square + eps in [2^-10, 2^13] (the rsqrt input is up to twice it).
template <Protocol P>
Task<typename P::Share> rms_norm(P& p, const typename P::Share& x, const typename P::Share& gamma,
                                 double eps = 1e-5) {
  const std::size_t d = P::shape(x).back();
  const Shape lead = detail::leading_shape<P>(x);
  if constexpr (NativeReal<P>) {
    auto ms = co_await detail::mean_last(p, co_await p.mul_trunc(x, x));
    ms = add_constant(p, ms, eps);
    auto inv = co_await rsqrt(p, ms);
    auto normed = co_await p.mul_trunc(x, broadcast_last<P>(inv, d));
    co_return co_await p.mul_trunc(normed, detail::rows_of<P>(gamma, lead));
  } else {
    int b = 0;
    while ((std::size_t{2} << b) <= d) ++b;
    const double r = static_cast<double>(d) / std::ldexp(1.0, b);  // in [1, 2)
    const FixedPoint fp(p.frac_bits());
    auto scaled_ms = [&](P& q) -> Task<typename P::Share> {  // mean square * r (+ eps * r), then rsqrt
      auto sq = co_await q.mul_trunc(x, x, q.frac_bits() + b);
      co_return co_await rsqrt(q, add_constant(q, sum_last<P>(sq), eps * r));
    };
    auto scaled_xg = [&](P& q) -> Task<typename P::Share> {  // x * gamma * sqrt(r)
      const Shape gs = P::shape(gamma);
      auto g = co_await q.truncate(q.mul_public(gamma, ring_filled(gs, fp.encode(std::sqrt(r)))), q.frac_bits());
      co_return co_await q.mul_trunc(x, detail::rows_of<P>(g, lead));
    };
    P pa = p.fork(), pb = p.fork();
    auto [inv, xg] = co_await when_all(scaled_ms(pa), scaled_xg(pb));
    co_return co_await p.mul_trunc(xg, broadcast_last<P>(inv, d));
  }
}

}  // namespace mpcache::ops
