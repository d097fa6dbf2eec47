// One-hot encoding of secret indices by short equality: A2B of the index's
// ceil(log2 C) bits once, then per class an AND of bit literals (the class
// number is public, so literals are local XORs), then B2A. Cost is set by
// log2 C, not by the ring width.
export module mpcache.ops:one_hot;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;

export namespace mpcache::ops {

// idx: shape S with values in [0, classes); result: S + (classes), 0/1:
// A2B of the index's low bits, a literal per class and bit, their AND (on
// packed words: and_low_bits_packed), B2A.
// Values may also lie in [classes, 2^width) (all-zero rows) if the caller
// passes that width: only the low `width` bits are compared.
template <Protocol P>
Task<typename P::Share> one_hot(P& p, const typename P::Share& idx, std::size_t classes, int min_width = 0) {
  if (classes < 1)
    throw Error(ErrorCode::invalid_argument, "one_hot over zero classes");
  if constexpr (ExactReals<P>) co_return p.exact_one_hot(idx, classes);
  const int width = std::max({1, ceil_log2(classes), min_width});
  auto bits = co_await p.to_bits(idx, width);
  auto repeated = P::apply(bits, [&](const RingTensor& t) { return ring_repeat_last(t, classes); });
  // Bit t of the literal is 1 iff index bit t equals bit t of the class;
  // bits above `width` become 1 and do not disturb the AND.
  RingTensor pattern = RingTensor::from_shape(P::shape(repeated));
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern.data()[i] = ~Ring(i % classes);
  auto literals = p.bits_xor_public(repeated, pattern);
  co_return co_await p.bit_to_arith(co_await and_low_bits_packed(p, literals, width));
}

}  // namespace mpcache::ops
