// Share layout helpers, generic over the backend: slicing, concatenation and
// reshaping along the last axis are component-wise and need no messages;
// public constants become shares through add_public.
module;
#include "prelude.hpp"
export module mpcache.ops:layout;
import mpcache.core;
import mpcache.proto;

export namespace mpcache::ops {

template <Protocol P, class S>
S slice_last(const S& a, std::size_t begin, std::size_t end) {
  return P::apply(a, [&](const RingTensor& t) { return ring_slice_last(t, begin, end); });
}

template <Protocol P>
typename P::Share concat_last(const typename P::Share& a, const typename P::Share& b) {
  return P::apply2(a, b, [](const RingTensor& x, const RingTensor& y) {
    return ring_concat_last(x, y);
  });
}

template <Protocol P, class S>
S reshape(const S& a, const Shape& shape) {
  return P::apply(a, [&](const RingTensor& t) { return ring_reshape(t, shape); });
}

// A sharing of the public tensor `value`, built locally from any share.
template <Protocol P>
typename P::Share public_share(const P& p, const typename P::Share& like, const RingTensor& value) {
  const Shape shape = shape_of(value);
  return p.add_public(P::apply(like, [&](const RingTensor&) { return ring_zeros(shape); }), value);
}

// (..., n) -> (..., 1): local sum over the last axis.
// x + c for a public real constant c: fixed-point encoded on ring backends,
// exact on float64 ones.
template <Protocol P>
typename P::Share add_constant(const P& p, const typename P::Share& x, double c) {
  if constexpr (NativeReal<P>) {
    return p.map_real(x, [c](double v) { return v + c; });
  } else {
    return p.add_public(x, ring_filled(P::shape(x), FixedPoint(p.frac_bits()).encode(c)));
  }
}

template <Protocol P>
typename P::Share sum_last(const typename P::Share& a) {
  return P::apply(a, [](const RingTensor& t) {
    Shape s = shape_of(t);
    s.push_back(1);
    return ring_sum_second_last(ring_reshape(t, s));
  });
}

// (..., 1) -> (..., n): a column repeated along the last axis.
template <Protocol P>
typename P::Share broadcast_last(const typename P::Share& column, std::size_t n) {
  return P::apply(column, [n](const RingTensor& t) {
    Shape s = shape_of(t);
    s.pop_back();
    return ring_repeat_last(ring_reshape(t, s), n);
  });
}

// Split the last axis into adjacent pairs: (..., 2m) -> first and second of
// each pair, each (..., m).
template <Protocol P, class S>
std::pair<S, S> split_pairs(const S& a) {
  Shape shape = P::shape(a);
  const std::size_t m = shape.back() / 2;
  Shape paired = shape;
  paired.back() = m;
  paired.push_back(2);
  Shape out = shape;
  out.back() = m;
  S pairs = reshape<P>(slice_last<P>(a, 0, 2 * m), paired);
  return {reshape<P>(slice_last<P>(pairs, 0, 1), out), reshape<P>(slice_last<P>(pairs, 1, 2), out)};
}

}  // namespace mpcache::ops
