// Comparisons and selection, generic over the backend.
//   msb(a)            A2B (64 bits) + B2A: 10 rounds on rss3, 15 words/element/party
//   less_than(a, b)   msb(a - b); requires |a - b| < 2^63
//   select(c, x, y)   c ? x : y for an arithmetic 0/1 c: 1 multiplication
//   is_zero(a, w)     a == 0 for |a| < 2^w: A2B of w bits, AND tree, B2A
//   equal(a, b, w)    is_zero(a - b, w): short values pay for w bits, not 64
module;
#include "prelude.hpp"
export module mpcache.ops:compare;
import mpcache.core;
import mpcache.async;
import mpcache.proto;

export namespace mpcache::ops {

inline int ceil_log2(std::size_t n) {
  int l = 0;
  while ((std::size_t{1} << l) < n) ++l;
  return l;
}

// 1 where a < 0 (signed view), else 0.
template <Protocol P>
Task<typename P::Share> msb(P& p, const typename P::Share& a) {
  if constexpr (NativeReal<P>) {
    auto out = a;
    for (auto& v : out.value) v = v < 0 ? 1.0 : 0.0;
    co_return out;
  }
  auto bits = co_await p.to_bits(a, ring_bits);
  co_return co_await p.bit_to_arith(p.bits_shift_right(bits, ring_bits - 1));
}

// (A coroutine, not a forwarding function: the difference must live in this
// frame until msb, which takes it by reference, has finished.)
template <Protocol P>
Task<typename P::Share> less_than(P& p, const typename P::Share& a, const typename P::Share& b) {
  const auto difference = p.sub(a, b);
  co_return co_await msb(p, difference);
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

// 1 where a == 0, for |a| < 2^width (the caller's promise).
template <Protocol P>
Task<typename P::Share> is_zero(P& p, const typename P::Share& a, int width) {
  auto bits = co_await p.to_bits(a, width);
  // Flip every bit: low bits become "bit is 0", high bits (0 after A2B) become 1.
  auto flipped = p.bits_xor_public(bits, ring_filled(P::shape(bits), ~Ring{0}));
  co_return co_await p.bit_to_arith(co_await and_low_bits(p, std::move(flipped), width));
}

template <Protocol P>
Task<typename P::Share> equal(P& p, const typename P::Share& a, const typename P::Share& b,
                              int width) {
  const auto difference = p.sub(a, b);
  co_return co_await is_zero(p, difference, width);
}

}  // namespace mpcache::ops
