// max and argmax along the last axis by a tournament of adjacent pairs:
// ceil(log2 n) levels, each one comparison and the selects it drives (values
// and indices selected concurrently, sharing rounds). Ties keep the lower
// index, so every backend returns the same index.
module;
#include "prelude.hpp"
export module mpcache.ops:reduce;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;

export namespace mpcache::ops {

template <Protocol P>
struct ArgMax {
  typename P::Share value;  // (..., 1)
  typename P::Share index;  // (..., 1), integer (not fixed-point)
};

template <Protocol P>
Task<ArgMax<P>> argmax_last(P& p, typename P::Share x, bool with_index = true) {
  Shape shape = P::shape(x);
  if (shape.empty() || shape.back() == 0)
    throw Error(ErrorCode::invalid_argument,
                "argmax over an empty last axis, shape " + shape_string(shape));
  const std::size_t n = shape.back();
  if constexpr (NativeReal<P>) {
    Shape out_shape = shape;
    out_shape.back() = 1;
    RealTensor value = xt::empty<double>(out_shape), index = xt::empty<double>(out_shape);
    for (std::size_t r = 0; r < value.size(); ++r) {
      const double* row = x.value.data() + r * n;
      const std::size_t best = static_cast<std::size_t>(std::max_element(row, row + n) - row);
      value.data()[r] = row[best];  // max_element keeps the first (lowest index) of ties
      index.data()[r] = static_cast<double>(best);
    }
    co_return ArgMax<P>{typename P::Share{std::move(value)}, typename P::Share{std::move(index)}};
  }
  RingTensor iota = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  typename P::Share idx = public_share(p, x, iota);
  while (P::shape(x).back() > 1) {
    const std::size_t len = P::shape(x).back();
    auto [a, b] = split_pairs<P>(x);
    auto [ia, ib] = split_pairs<P>(idx);
    auto b_wins = co_await less_than(p, a, b);  // strict: ties keep a, the lower index
    P pv = p.fork(), pi = p.fork();
    typename P::Share v, i;
    if (with_index) {
      auto [sv, si] = co_await when_all(select(pv, b_wins, b, a), select(pi, b_wins, ib, ia));
      v = std::move(sv);
      i = std::move(si);
    } else {
      v = co_await select(pv, b_wins, b, a);
      i = ia;
    }
    if (len % 2) {  // the odd one out waits for the next level
      v = concat_last<P>(v, slice_last<P>(x, len - 1, len));
      i = concat_last<P>(i, slice_last<P>(idx, len - 1, len));
    }
    x = std::move(v);
    idx = std::move(i);
  }
  co_return ArgMax<P>{std::move(x), std::move(idx)};
}

template <Protocol P>
Task<typename P::Share> max_last(P& p, typename P::Share x) {
  auto r = co_await argmax_last(p, std::move(x), false);
  co_return std::move(r.value);
}

}  // namespace mpcache::ops
