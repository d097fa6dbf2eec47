// softmax along the last axis: subtract the row max (group tournament, see
// reduce.cppm), exp_neg, optional public 0/1 mask (masked entries get
// weight 0), sum, reciprocal of the sum (in [1, n]), one product. Rows must
// have at least one unmasked entry.
//   range: |x| < 2^12 (attention scores): the max's and exp's comparisons
//     are narrowed to it, and the reciprocal to sums below 2n
//   error: <= 4e-3 absolute per entry for n <= 1024 (tested against float64)
//   cost (rss3): max (a tournament_plan, 40 rounds for 2 rows of 1000) +
//     exp 10 + reciprocal 18 + 1; softmax_matmul overlaps the product with V
//     with the reciprocal
module;
#include "prelude.hpp"
export module mpcache.ops:softmax;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :reduce;
import :exp;
import :reciprocal;
import :compare;

export namespace mpcache::ops {

namespace detail {
// exp(x - max(x)), masked: the numerators of softmax.
template <Protocol P>
Task<typename P::Share> softmax_numerators(P& p, const typename P::Share& x, const std::optional<RingTensor>& mask) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.back();
  if (mask && shape_of(*mask) != shape)
    throw Error(ErrorCode::invalid_argument, "softmax mask has shape " +
                                                 shape_string(shape_of(*mask)) + ", scores " +
                                                 shape_string(shape));
  const int width = comparison_width(p.frac_bits(), activation_magnitude_bits);
  auto row_max = co_await max_last(p, x, 0, width);  // (..., 1)
  auto shifted = p.sub(x, broadcast_last<P>(row_max, n));
  auto e = co_await exp_neg(p, shifted);
  if (mask) e = p.mul_public(e, *mask);  // integer 0/1: no truncation
  co_return e;
}

// 1 / sum of the numerators (..., 1): the sum lies in [1, n] up to exp's
// error (the max's own term is exp(0)), so below 2n.
template <Protocol P>
Task<typename P::Share> inverse_sum(P& p, const typename P::Share& e) {
  const std::size_t n = P::shape(e).back();
  co_return co_await reciprocal(p, sum_last<P>(e), ceil_log2(2 * n));
}
}  // namespace detail

template <Protocol P>
Task<typename P::Share> softmax_last(P& p, const typename P::Share& x,
                                     const std::optional<RingTensor>& mask = std::nullopt) {
  auto e = co_await detail::softmax_numerators(p, x, mask);
  auto inv = co_await detail::inverse_sum(p, e);
  co_return co_await p.mul_trunc(e, broadcast_last<P>(inv, P::shape(x).back()));
}

// softmax(x) v for scores x (rows, n) and values v (n, d): the product
// e v runs while the reciprocal of the sum does, and the reciprocal then
// scales its rows: one round fewer than softmax_last and a matmul. With
// `probs`, the probabilities are computed too, in the same last round.
//   error: <= 4e-3 sum_i |v_i| per output entry (tested against float64)
template <Protocol P>
Task<typename P::Share> softmax_matmul(P& p, const typename P::Share& x, const typename P::Share& v,
                                       const std::optional<RingTensor>& mask = std::nullopt,
                                       typename P::Share* probs = nullptr) {
  using Share = typename P::Share;
  const std::size_t n = P::shape(x).back(), d = P::shape(v).back();
  if (P::shape(v).size() != 2 || P::shape(v)[0] != n)
    throw Error(ErrorCode::invalid_argument, "softmax_matmul: values " + shape_string(P::shape(v)) + " for scores " +
                                                 shape_string(P::shape(x)));
  auto e = co_await detail::softmax_numerators(p, x, mask);
  P pr = p.fork(), pv = p.fork();
  auto [inv, ev] = co_await when_all(detail::inverse_sum(pr, e), pv.matmul_trunc(e, v));
  auto scaled = [&](P& q, const Share& t, std::size_t width) -> Task<Share> {
    co_return co_await q.mul_trunc(t, broadcast_last<P>(inv, width));
  };
  if (!probs) co_return co_await scaled(p, ev, d);
  P po = p.fork(), pp = p.fork();
  auto [out, pr_out] = co_await when_all(scaled(po, ev, d), scaled(pp, e, n));
  *probs = std::move(pr_out);
  co_return out;
}

}  // namespace mpcache::ops
