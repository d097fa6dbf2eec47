// exp for non-positive inputs (softmax after max subtraction), PUMA-style:
// exp(x) ~ (1 + x/2^8)^(2^8) by 8 squarings, and 0 below -14 (exp(-14) < 1e-6).
// The clipping comparison runs concurrently with the squarings.
//   range: x <= 0 (fixed point, 18 fraction bits)
//   error: |exp_neg(x) - exp(x)| <= 2.5e-3 on [-14, 0], <= 1e-6 below (tested)
//   cost (rss3): 10 rounds = max(truncate + 8 squarings, comparison) + select (tested)
export module mpcache.ops:exp;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;

export namespace mpcache::ops {

inline constexpr int exp_squarings = 8;
inline constexpr double exp_clip_below = -14.0;

namespace detail {
template <Protocol P>
Task<typename P::Share> exp_by_squaring(P& p, const typename P::Share& x) {
  const Shape s = P::shape(x);
  auto y = co_await p.truncate(x, exp_squarings);  // x / 256
  y = p.add_public(y, ring_filled(s, Ring{1} << p.frac_bits()));
  for (int i = 0; i < exp_squarings; ++i) y = co_await p.mul_trunc(y, y);
  co_return y;
}
}  // namespace detail

template <Protocol P>
Task<typename P::Share> exp_neg(P& p, const typename P::Share& x) {
  if constexpr (ExactReals<P>) co_return p.map_real(x, [](double v) { return std::exp(v); });
  const Shape s = P::shape(x);
  const FixedPoint fp(p.frac_bits());
  const auto clip = public_share(p, x, ring_filled(s, fp.encode(exp_clip_below)));
  P pe = p.fork(), pc = p.fork();
  auto [y, below] = co_await when_all(detail::exp_by_squaring(pe, x), less_than(pc, x, clip));
  co_return p.sub(y, co_await p.mul(below, y));  // below ? 0 : y
}

}  // namespace mpcache::ops
