// softmax along the last axis: subtract the row max (group tournament, see
// reduce.cppm: 14-15 rounds per level for short rows), exp_neg,
// optional public 0/1 mask (masked entries get weight 0), sum, reciprocal of
// the sum (in [1, n]), one product. Rows must have at least one unmasked entry.
//   error: <= 4e-3 absolute per entry for n <= 1024 (tested against float64)
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

export namespace mpcache::ops {

template <Protocol P>
Task<typename P::Share> softmax_last(P& p, const typename P::Share& x,
                                     const std::optional<RingTensor>& mask = std::nullopt) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.back();
  if (mask && shape_of(*mask) != shape)
    throw Error(ErrorCode::invalid_argument, "softmax mask has shape " +
                                                 shape_string(shape_of(*mask)) + ", scores " +
                                                 shape_string(shape));
  auto row_max = co_await max_last(p, x);  // (..., 1)
  auto shifted = p.sub(x, broadcast_last<P>(row_max, n));
  auto e = co_await exp_neg(p, shifted);
  if (mask) e = p.mul_public(e, *mask);  // integer 0/1: no truncation
  auto inv = co_await reciprocal(p, sum_last<P>(e));  // (..., 1)
  co_return co_await p.mul_trunc(e, broadcast_last<P>(inv, n));
}

}  // namespace mpcache::ops
