// Share layout helpers, generic over the backend: slicing, concatenation and
// reshaping along the last axis, and the row layouts of (rows, d) tensors a
// KV cache and its summaries use (row ranges, stacking, transposes, tiling,
// sums of row runs), are component-wise and need no messages; public
// constants become shares through add_public.
export module mpcache.ops:layout;
import mpcache.std;
import mpcache.core;
import mpcache.async;
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

// sum_k coefficients[k] terms[k] for public real coefficients encoded with
// `bits` fraction bits: terms at 2^f give the sum at 2^(f + bits), locally
// (a polynomial's weighted powers before their truncation).
template <Protocol P>
typename P::Share weighted_terms(const P& p, std::span<const typename P::Share> terms,
                                 std::span<const double> coefficients, int bits) {
  if (terms.empty() || terms.size() != coefficients.size())
    throw Error(ErrorCode::invalid_argument, "weighted_terms: " + std::to_string(terms.size()) + " terms, " +
                                                 std::to_string(coefficients.size()) + " coefficients");
  const Shape s = P::shape(terms[0]);
  const FixedPoint coefficient(bits);
  auto term = [&](std::size_t k) {
    return p.mul_public(terms[k], ring_filled(s, coefficient.encode(coefficients[k])));
  };
  auto sum = term(0);
  for (std::size_t k = 1; k < terms.size(); ++k) sum = p.add(sum, term(k));
  return sum;
}

// (..., n) -> (..., 1): local sum over the last axis.
// x + c for a public real constant c: fixed-point encoded on ring backends,
// exact on float64 ones.
template <Protocol P>
typename P::Share add_constant(const P& p, const typename P::Share& x, double c) {
  if constexpr (ExactReals<P>) {
    return p.map_real(x, [c](double v) { return v + c; });
  } else {
    return p.add_public(x, ring_filled(P::shape(x), FixedPoint(p.frac_bits()).encode(c)));
  }
}

// A secret tensor from `owner`'s real values: fixed-point encoded and input
// on ring backends; ExactReals backends keep the reals (every party holds
// them, so they must be given).
template <Protocol P>
Task<typename P::Share> secret_real(P& p, PartyId owner, std::optional<RealTensor> value, const Shape& shape) {
  if constexpr (ExactReals<P>) {
    if (!value) throw Error(ErrorCode::invalid_argument, "secret_real: the exact-reals backend needs the values");
    co_return p.from_real(*value);
  } else {
    std::optional<RingTensor> encoded;
    if (value) encoded = FixedPoint(p.frac_bits()).encode(*value);
    co_return co_await p.input(owner, std::move(encoded), shape);
  }
}

// sum_i x_i * c_i for public real tensors c_i of x_i's shape. Ring
// backends encode the c_i, add the products and truncate once (1 round on
// rss3); ExactReals backends multiply unrounded.
template <Protocol P>
struct RealWeighted {
  const typename P::Share& x;
  const RealTensor& weights;
};
template <Protocol P>
Task<typename P::Share> sum_weighted_by_reals(P& p, const std::vector<RealWeighted<P>>& terms) {
  if (terms.empty()) throw Error(ErrorCode::invalid_argument, "sum_weighted_by_reals: no terms");
  if constexpr (ExactReals<P>) {
    auto sum = p.mul_real(terms[0].x, terms[0].weights);
    for (std::size_t i = 1; i < terms.size(); ++i) sum = p.add(sum, p.mul_real(terms[i].x, terms[i].weights));
    co_return sum;
  } else {
    const FixedPoint fp(p.frac_bits());
    auto sum = p.mul_public(terms[0].x, fp.encode(terms[0].weights));
    for (std::size_t i = 1; i < terms.size(); ++i) sum = p.add(sum, p.mul_public(terms[i].x, fp.encode(terms[i].weights)));
    co_return co_await p.truncate(sum, p.frac_bits());
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

// ---------------------------------------------------------------------------
// Rows of (rows, d) tensors.

template <Protocol P>
typename P::Share transpose(const typename P::Share& a) {
  return P::apply(a, [](const RingTensor& t) { return transpose(t); });
}

// (m, d) over (n, d) -> (m + n, d).
template <Protocol P>
typename P::Share stack_rows(const typename P::Share& a, const typename P::Share& b) {
  return P::apply2(a, b, [](const RingTensor& x, const RingTensor& y) {
    const std::size_t d = x.shape()[1];
    if (y.shape()[1] != d)
      throw Error(ErrorCode::invalid_argument, "stack_rows: rows of " + std::to_string(d) + " and " +
                                                   std::to_string(y.shape()[1]) + " elements");
    // Both blocks copied once, straight into place.
    RingTensor out = RingTensor::from_shape({(x.size() + y.size()) / d, d});
    std::copy(y.begin(), y.end(), std::copy(x.begin(), x.end(), out.begin()));
    return out;
  });
}

// Rows [begin, end) of a (T, d) tensor.
template <Protocol P>
typename P::Share rows(const typename P::Share& a, std::size_t begin, std::size_t end) {
  return P::apply(a, [begin, end](const RingTensor& t) {
    const std::size_t n = t.shape()[0], d = t.shape()[1];
    if (begin > end || end > n)
      throw Error(ErrorCode::invalid_argument, "rows: [" + std::to_string(begin) + ", " + std::to_string(end) +
                                                   ") outside " + std::to_string(n) + " rows");
    // Only the rows taken are copied.
    RingTensor out = RingTensor::from_shape({end - begin, d});
    std::copy(t.data() + begin * d, t.data() + end * d, out.data());
    return out;
  });
}

// A (1, d) row tiled to (n, d).
template <Protocol P>
typename P::Share tile_row(const typename P::Share& row, std::size_t n) {
  return P::apply(row, [n](const RingTensor& t) {
    const std::size_t d = t.size();
    RingTensor out = RingTensor::from_shape({n, d});
    for (std::size_t r = 0; r < n; ++r) std::copy(t.data(), t.data() + d, out.data() + r * d);
    return out;
  });
}

// (n, d) -> (n * s, d): row r repeated s times in place (r, r, ..., r + 1, ...).
template <Protocol P>
typename P::Share repeat_rows(const typename P::Share& a, std::size_t s) {
  return P::apply(a, [s](const RingTensor& t) {
    const std::size_t n = t.shape()[0], d = t.shape()[1];
    RingTensor out = RingTensor::from_shape({n * s, d});
    for (std::size_t r = 0; r < n * s; ++r)
      std::copy(t.data() + (r / s) * d, t.data() + (r / s + 1) * d, out.data() + r * d);
    return out;
  });
}

// (n, d) -> (n * s, d): the whole block s times over.
template <Protocol P>
typename P::Share tile_rows(const typename P::Share& a, std::size_t s) {
  return P::apply(a, [s](const RingTensor& t) {
    RingTensor out = RingTensor::from_shape({t.shape()[0] * s, t.shape()[1]});
    for (std::size_t c = 0; c < s; ++c) std::copy(t.begin(), t.end(), out.data() + c * t.size());
    return out;
  });
}

// (n * s, d) -> (n, d): each run of s rows summed.
template <Protocol P>
typename P::Share sum_row_runs(const typename P::Share& a, std::size_t s) {
  return P::apply(a, [s](const RingTensor& t) {
    const std::size_t n = t.shape()[0] / s, d = t.shape()[1];
    RingTensor out = ring_zeros({n, d});
    for (std::size_t r = 0; r < n * s; ++r)
      for (std::size_t i = 0; i < d; ++i) out(r / s, i) += t(r, i);
    return out;
  });
}

// (g, d) -> (1, d): all rows summed.
template <Protocol P>
typename P::Share sum_rows(const typename P::Share& a) {
  return P::apply(a, [](const RingTensor& t) {
    const std::size_t d = t.shape()[1];
    return ring_reshape(ring_sum_second_last(t), {1, d});
  });
}

// x * n for a public count n, by doubling and adding: exact on every
// backend (a public integer factor is not a fixed-point one).
template <Protocol P>
typename P::Share times_count(const P& p, const typename P::Share& x, std::size_t n) {
  std::optional<typename P::Share> sum;
  typename P::Share power = x;
  for (; n > 0; n >>= 1) {
    if (n & 1) sum = sum ? p.add(*sum, power) : power;
    if (n > 1) power = p.add(power, power);
  }
  return sum ? *sum : p.sub(x, x);
}

}  // namespace mpcache::ops
