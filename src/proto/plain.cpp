module;
#include "prelude.hpp"
module mpcache.proto;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

Plain::Plain(int frac_bits) : frac_bits_(frac_bits) { FixedPoint check(frac_bits); }

Task<PlainShare> Plain::input(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  if (!value)
    throw Error(ErrorCode::invalid_argument,
                "plain input from party " + std::to_string(owner) + ": no value given");
  if (shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument, "plain input: value has shape " +
                                                 shape_string(shape_of(*value)) +
                                                 ", declared shape is " + shape_string(shape));
  co_return PlainShare{std::move(*value)};
}

Task<RingTensor> Plain::reveal(const Share& a) { co_return a.value; }

Task<std::optional<RingTensor>> Plain::reveal_to(PartyId, const Share& a) {
  co_return std::optional<RingTensor>(a.value);
}

PlainShare Plain::add(const Share& a, const Share& b) const { return {ring_add(a.value, b.value)}; }
PlainShare Plain::sub(const Share& a, const Share& b) const { return {ring_sub(a.value, b.value)}; }
PlainShare Plain::neg(const Share& a) const { return {ring_neg(a.value)}; }
PlainShare Plain::add_public(const Share& a, const RingTensor& c) const {
  return {ring_add(a.value, c)};
}
PlainShare Plain::mul_public(const Share& a, const RingTensor& c) const {
  return {ring_mul(a.value, c)};
}
PlainShare Plain::matmul_public(const Share& a, const RingTensor& c) const {
  return {ring_matmul(a.value, c)};
}

Task<PlainShare> Plain::mul(const Share& a, const Share& b) { co_return PlainShare{ring_mul(a.value, b.value)}; }
Task<PlainShare> Plain::matmul(const Share& a, const Share& b) {
  co_return PlainShare{ring_matmul(a.value, b.value)};
}
Task<PlainShare> Plain::truncate(const Share& a, int bits) {
  co_return PlainShare{ring_shift_floor(a.value, bits)};
}
Task<PlainShare> Plain::mul_trunc(const Share& a, const Share& b) {
  co_return PlainShare{ring_shift_floor(ring_mul(a.value, b.value), frac_bits_)};
}
Task<PlainShare> Plain::matmul_trunc(const Share& a, const Share& b) {
  co_return PlainShare{ring_shift_floor(ring_matmul(a.value, b.value), frac_bits_)};
}

}  // namespace mpcache
