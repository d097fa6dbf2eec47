// Comparisons and selection, generic over the backend.
//   msb(a, w)         the sign bit of a mod 2^w as an arithmetic 0/1;
//                     requires |a| < 2^(w-1): modulo 2^w the sign is then
//                     bit w - 1. The backend's msb_arith where it has one
//                     (rss3 dcf: 2 rounds), else msb_bits (below) then B2A:
//                     on rss3 circuit 8 rounds at w = 64, 7 at w = 27,
//                     about 8 + 17 bytes per element at w = 64
//   msb_bits(a, w)    the same bit before B2A (boolean), for bit_dot. A
//                     backend may provide its own (rss3: packed bit planes,
//                     2 + ceil(log2((w-1)/g)) rounds, see rss3.cppm; add2:
//                     packed bit planes, 1 + ceil(log2(w-1)), add2_msb.cpp);
//                     else A2B of the low w bits
//   bit_times(b, x)   b x elementwise for a boolean bit b: B2A fused with the
//                     product, 2 rounds where B2A then a product took 3
//   msb_times(a, x, w) [a < 0] x: 2 + ceil(log2 w) + 2 rounds
//   less_than(a, b, w, r) msb(a - b, w); requires |a - b| < 2^(w-1); r as
//                     msb's result_bits
//   below_each(x, c)  [x < c_j] for public thresholds c_j, one batched msb
//   select(c, x, y)   c ? x : y for an arithmetic 0/1 c: 1 multiplication
//   detail::arithmetic_select_pays  whether a select among k values should
//                     take its one-hot from msb_arith and select by
//                     dot_trunc (1 round) rather than msb_bits and bit_dot
//                     (2): only on costs that price msb_arith (rss3 dcf)
//   select_by_bit(b, x, y) b ? x : y for a boolean b: a bit_times, 2 rounds
//                     (less_than_bits then this: one round less than
//                     less_than then select)
//   is_zero(a, w)     a == 0 for |a| < 2^w: A2B of w bits, AND tree (on
//                     words packed 64 / w to a word: and_low_bits_packed), B2A
//   equal(a, b, w)    is_zero(a - b, w): short values pay for w bits, not 64
export module mpcache.ops:compare;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;

export namespace mpcache::ops {

inline int ceil_log2(std::size_t n) {
  int l = 0;
  while ((std::size_t{1} << l) < n) ++l;
  return l;
}

// Words (of 8 bytes) per element that msb_bits at `width` costs the busiest
// party on backend costs C, for planning (n large, so packing is whole).
template <CostModel C>
double msb_bits_words(int width) {
  constexpr std::size_t n = 3 * 64 * 1024;
  return double(C::msb_bits(width, n, 0).max_bytes()) / double(n) / 8.0;
}

// (The ops of a model do not narrow their comparisons: nothing bounds a
// trained model's MLP inputs or hidden states below, e.g., 2^12, which 32
// bits would need.)
// Width of a comparison of fixed-point values with |value| < 2^magnitude_bits
// (real), so that |a - b| < 2^(magnitude_bits + 1) and the sign fits:
// frac + magnitude + 2 bits.
inline int comparison_width(int frac_bits, int magnitude_bits) {
  return std::min(ring_bits, frac_bits + magnitude_bits + 2);
}

// 1 where a < 0 (signed view), else 0. With width < 64 only the low `width`
// bits are converted, which is exact when |a| < 2^(width-1): fewer rounds
// (the adder is shorter) and fewer bytes.
template <Protocol P>
Task<typename P::Bits> msb_bits(P& p, const typename P::Share& a, int width = ring_bits) {
  if (width < 2 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument, "msb: width " + std::to_string(width) + " is outside [2, 64]");
  if constexpr (SignBits<P>) {
    co_return co_await p.msb_bits(a, width);
  } else {
    auto bits = co_await p.to_bits(a, width);
    co_return p.bits_shift_right(bits, width - 1);
  }
}

// The backend's own arithmetic sign (ArithmeticSign: rss3 dcf, 2 rounds)
// where it has one, else msb_bits then B2A. result_bits < 64: the caller
// needs the sign only mod 2^result_bits (a backend may then send fewer
// bytes and leave the higher bits wrong; exact backends ignore it).
template <Protocol P>
Task<typename P::Share> msb(P& p, const typename P::Share& a, int width = ring_bits, int result_bits = ring_bits) {
  if constexpr (ExactReals<P>) {
    co_return p.exact_sign(a);
  } else if constexpr (ArithmeticSign<P>) {
    if (width < 2 || width > ring_bits)
      throw Error(ErrorCode::invalid_argument, "msb: width " + std::to_string(width) + " is outside [2, 64]");
    if constexpr (NarrowArithmeticSign<P>) co_return co_await p.msb_arith(a, width, result_bits);
    else co_return co_await p.msb_arith(a, width);
  } else {
    co_return co_await p.bit_to_arith(co_await msb_bits(p, a, width));
  }
}

// b x elementwise (bit 0 of each word of b), truncated by `bits` (0: exact,
// as a bit times a fixed-point value needs): bit_dot over a last axis of one.
template <Protocol P>
Task<typename P::Share> bit_times(P& p, const typename P::Bits& b, const typename P::Share& x, int bits = 0) {
  const Shape s = P::shape(x);
  Shape column = s;
  column.push_back(1);
  auto out = co_await p.bit_dot(reshape<P>(b, column), reshape<P>(x, column), bits);
  co_return reshape<P>(out, s);
}

// [a < 0] x elementwise; |a| < 2^(width-1) required.
template <Protocol P>
Task<typename P::Share> msb_times(P& p, const typename P::Share& a, const typename P::Share& x,
                                  int width = ring_bits) {
  if constexpr (ExactReals<P>) {
    co_return co_await p.mul(p.exact_sign(a), x);
  } else {
    co_return co_await bit_times(p, co_await msb_bits(p, a, width), x);
  }
}

// |x| = x - 2 [x < 0] x: msb_times' rounds.
template <Protocol P>
Task<typename P::Share> absolute(P& p, const typename P::Share& x) {
  auto negative_part = co_await msb_times(p, x, x);
  co_return p.sub(x, p.add(negative_part, negative_part));
}

// [x < c_j] for every public threshold c_j (ring-encoded), on a new last
// axis: (...) -> (..., k), all in one batched msb of x - c_j over `width`
// bits (|x - c_j| < 2^(width-1) required).
namespace detail {
// (shape..., k) holding values[t] at position t of the new last axis.
inline RingTensor tiled_last(Shape shape, const std::vector<Ring>& values) {
  const std::size_t k = values.size();
  shape.push_back(k);
  RingTensor out = RingTensor::from_shape(shape);
  Ring* to = out.data();
  for (std::size_t row = 0, rows = k > 0 ? out.size() / k : 0; row < rows; ++row, to += k)
    std::copy(values.begin(), values.end(), to);
  return out;
}

// x (...) repeated k times on a new last axis (..., k).
template <Protocol P>
typename P::Share repeat_last(const typename P::Share& x, std::size_t k) {
  return P::apply(x, [k](const RingTensor& t) { return ring_repeat_last(t, k); });
}

// (shape) holding 1 at the last position of its last axis of w, else 0:
// the public 1 of an interval test that is true above the last threshold.
inline RingTensor top_is_one(const Shape& shape, std::size_t w) {
  RingTensor top = ring_zeros(shape);
  for (std::size_t i = w - 1; i < top.size(); i += w) top.data()[i] = 1;
  return top;
}

// one_hot_t = combine(below_{t+1}, below_t) on the last axis of w, with
// below_w taken as 0 here: combine is linear (XOR for bits, a difference
// for ring 0/1), component-wise, so the public 1 of below_w goes in once,
// after (top_is_one).
template <class P, class S, class Combine>
S adjacent_combined(const S& below, std::size_t w, Combine combine) {
  return P::apply(below, [w, combine](const RingTensor& t) {
    RingTensor out = RingTensor::from_shape(shape_of(t));
    for (std::size_t i = 0; i < t.size(); ++i) out.data()[i] = combine(i % w + 1 < w ? t.data()[i + 1] : 0, t.data()[i]);
    return out;
  });
}

// x - c_j on a new last axis (..., k).
template <Protocol P>
typename P::Share minus_each(const P& p, const typename P::Share& x, const std::vector<Ring>& thresholds) {
  std::vector<Ring> minus(thresholds.size());
  for (std::size_t j = 0; j < minus.size(); ++j) minus[j] = Ring{0} - thresholds[j];
  return p.add_public(repeat_last<P>(x, minus.size()), tiled_last(P::shape(x), minus));
}
}  // namespace detail

template <Protocol P>
Task<typename P::Share> below_each(P& p, const typename P::Share& x, const std::vector<Ring>& thresholds,
                                   int width = ring_bits) {
  const auto shifted = detail::minus_each(p, x, thresholds);
  co_return co_await msb(p, shifted, width);
}

// The same bits before B2A (boolean), for bit_dot.
template <Protocol P>
Task<typename P::Bits> below_each_bits(P& p, const typename P::Share& x, const std::vector<Ring>& thresholds,
                                       int width = ring_bits) {
  const auto shifted = detail::minus_each(p, x, thresholds);
  co_return co_await msb_bits(p, shifted, width);
}

namespace detail {
// A backend that can select with an arithmetic one-hot: msb_arith for the
// comparisons and dot_trunc (a sum of products in one round) for the select.
template <class P>
concept ArithmeticOneHot = ArithmeticSign<P> && requires(P& p, const typename P::Share& a, int bits) {
  { p.dot_trunc(a, a, bits) } -> std::same_as<Task<typename P::Share>>;
};

// Whether `comparisons` signs over `width` bits whose one-hots select one
// of `terms` values for each of `values` outputs should be arithmetic
// (msb_arith, then dot_trunc: a product's round) rather than bits
// (msb_bits, then bit_dot: B2A fused with the product, 2 rounds) on costs
// C: fewer rounds, then fewer bytes. Only cost models that price msb_arith
// (rss3 dcf) can say yes.
template <CostModel C>
bool arithmetic_select_pays(int width, std::size_t comparisons, std::size_t values, std::size_t terms) {
  if constexpr (!ArithmeticSignCosts<C>) {
    return false;
  } else {
    const OpCost arith = msb_arith_cost<C>(width, comparisons, 0) + C::mul(values);
    const OpCost bits = C::msb_bits(width, comparisons, 0) + C::bit_dot(values * terms, terms);
    return arith.rounds < bits.rounds || (arith.rounds == bits.rounds && arith.max_bytes() < bits.max_bytes());
  }
}

// The same on the costs p runs with (with_costs: dcf, with or without a store).
template <ArithmeticOneHot P>
bool arithmetic_select_pays(const P& p, int width, std::size_t comparisons, std::size_t values, std::size_t terms) {
  return with_costs(p, [&]<CostModel C>() { return arithmetic_select_pays<C>(width, comparisons, values, terms); });
}
}  // namespace detail

// (A coroutine, not a forwarding function: the difference must live in this
// frame until msb, which takes it by reference, has finished.)
template <Protocol P>
Task<typename P::Share> less_than(P& p, const typename P::Share& a, const typename P::Share& b,
                                  int width = ring_bits, int result_bits = ring_bits) {
  const auto difference = p.sub(a, b);
  co_return co_await msb(p, difference, width, result_bits);
}

// floor(x / 2^drop) less e, e in [0, 2], exact modulo 2^(64 - drop): each
// party shifts its own components right (a local floor, no message; three
// additive components at most, as rss3's). below_coarse and
// max_upper_last (reduce.cppm) compare such values on 64 - drop bits.
template <Protocol P>
typename P::Share coarse_components(const typename P::Share& x, int drop, const char* who) {
  if (drop < 0 || drop > ring_bits - 8)
    throw Error(ErrorCode::invalid_argument, std::string(who) + ": drop " + std::to_string(drop) +
                                                 " is outside [0, 56]");
  return P::apply(x, [drop](const RingTensor& r) {
    RingTensor out = RingTensor::from_shape(shape_of(r));
    for (std::size_t i = 0; i < r.size(); ++i) out.data()[i] = r.data()[i] >> drop;
    return out;
  });
}

// [x < c] for a public real c, at a resolution of 2^(drop - f): each party
// shifts its components of x right by `drop` bits (a local floor, no
// message), which leaves floor(x / 2^drop) - e with e in [0, 2] (three
// additive components at most, as rss3's), so one comparison of
// 64 - drop bits decides it (6.2 bytes at 27 bits against 15.6 at 64 on
// rss3's circuit; 5 rounds below 50 bits, 6 above). The answer is 1 for
// every x < c, 0 for every x >= c + 2^(drop + 1 - f) (c + 3 2^(drop - f)
// where c 2^(f - drop) is not whole), and either between.
// Exact for |x| < 2^62 (as ring integers); the backend's msb (B2A or its
// arithmetic sign) makes it arithmetic 0/1.
template <Protocol P>
Task<typename P::Share> below_coarse(P& p, const typename P::Share& x, double c, int drop) {
  if constexpr (ExactReals<P>) {
    co_return co_await msb(p, add_constant(p, x, -c));
  } else {
    auto coarse = coarse_components<P>(x, drop, "below_coarse");
    const int f = p.frac_bits();
    // t = floor(c 2^(f - drop)): x < c implies floor(x / 2^drop) <= t - 1 when
    // c 2^(f - drop) is whole; else floor(x / 2^drop) <= t, so compare with t + 1.
    const double scaled = std::ldexp(c, f - drop);
    const auto t = static_cast<std::int64_t>(std::floor(scaled)) + (std::floor(scaled) == scaled ? 0 : 1);
    const Ring minus_t = Ring{0} - static_cast<Ring>(t);
    // (add_public adds the public -t to the right component.)
    const auto shifted = p.add_public(std::move(coarse), ring_filled(P::shape(x), minus_t));
    co_return co_await msb(p, shifted, ring_bits - drop);
  }
}

// The bit of less_than before B2A (boolean), for select_by_bit / bit_dot.
template <Protocol P>
Task<typename P::Bits> less_than_bits(P& p, const typename P::Share& a, const typename P::Share& b,
                                      int width = ring_bits) {
  const auto difference = p.sub(a, b);
  co_return co_await msb_bits(p, difference, width);
}

// b ? x : y for a boolean bit b (bit 0 of each word), elementwise.
template <Protocol P>
Task<typename P::Share> select_by_bit(P& p, const typename P::Bits& b, const typename P::Share& x,
                                      const typename P::Share& y) {
  const auto difference = p.sub(x, y);
  co_return p.add(y, co_await bit_times(p, b, difference));
}

// c ? x : y, with c an arithmetic 0/1 sharing of the same shape. The product
// of an integer bit and a fixed-point value needs no truncation.
template <Protocol P>
Task<typename P::Share> select(P& p, const typename P::Share& c, const typename P::Share& x,
                               const typename P::Share& y) {
  co_return p.add(y, co_await p.mul(c, p.sub(x, y)));
}

// AND of the low `width` bits of every word, into bit 0 (bits above `width`
// must be 1). ceil(log2 width) rounds.
template <Protocol P>
Task<typename P::Bits> and_low_bits(P& p, typename P::Bits t, int width) {
  for (int s = 1; s < width; s *= 2) t = co_await p.bits_and(t, p.bits_shift_right(t, s));
  co_return t;
}

// and_low_bits' fields: width rounded up to a power of two, 64 / field of
// them to a word.
inline int and_tree_field(int width) { return 1 << ceil_log2(static_cast<std::size_t>(std::max(width, 1))); }
// Words each level of and_low_bits_packed ANDs for n words of `width` bits.
inline std::size_t and_tree_words(std::size_t n, int width) {
  const std::size_t per_word = static_cast<std::size_t>(ring_bits / and_tree_field(width));
  return (n + per_word - 1) / per_word;
}

// and_low_bits with the words' low fields packed 64 / F to a word, F =
// and_tree_field(width): the tree's shifts span F - 1 bits, so each field's
// AND stays inside it, and every level ANDs and_tree_words(n, width) words
// instead of n (a one-hot over 64 classes: 8 to a word). Bit 0 of every
// word of the result is the AND of that word's low `width` bits (bits
// above `width` must be 1, as for and_low_bits); the other bits are 0.
// Packing and unpacking are local: boolean shares are XORs of components.
template <Protocol P>
Task<typename P::Bits> and_low_bits_packed(P& p, const typename P::Bits& t, int width) {
  const int field = and_tree_field(width);
  const std::size_t per_word = static_cast<std::size_t>(ring_bits / field);
  if (per_word < 2 || width <= 1) co_return co_await and_low_bits(p, t, width);
  const Shape shape = P::shape(t);
  const std::size_t n = element_count(shape), words = and_tree_words(n, width);
  const Ring field_mask = (Ring{1} << field) - 1;
  auto packed = P::apply(t, [&](const RingTensor& x) {
    RingTensor out = ring_zeros({words});
    for (std::size_t i = 0; i < n; ++i)
      out.data()[i / per_word] |= (x.data()[i] & field_mask) << (field * static_cast<int>(i % per_word));
    return out;
  });
  auto anded = co_await and_low_bits(p, std::move(packed), width);
  co_return P::apply(anded, [&](const RingTensor& x) {
    RingTensor out = RingTensor::from_shape(shape);
    for (std::size_t i = 0; i < n; ++i)
      out.data()[i] = (x.data()[i / per_word] >> (field * static_cast<int>(i % per_word))) & 1;
    return out;
  });
}

// 1 where a == 0, for |a| < 2^width (the caller's promise).
template <Protocol P>
Task<typename P::Share> is_zero(P& p, const typename P::Share& a, int width) {
  auto bits = co_await p.to_bits(a, width);
  // Flip every bit: low bits become "bit is 0", high bits (0 after A2B) become 1.
  auto flipped = p.bits_xor_public(bits, ring_filled(P::shape(bits), ~Ring{0}));
  co_return co_await p.bit_to_arith(co_await and_low_bits_packed(p, flipped, width));
}

template <Protocol P>
Task<typename P::Share> equal(P& p, const typename P::Share& a, const typename P::Share& b,
                              int width) {
  const auto difference = p.sub(a, b);
  co_return co_await is_zero(p, difference, width);
}

}  // namespace mpcache::ops
