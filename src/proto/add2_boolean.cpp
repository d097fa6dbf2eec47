// add2 boolean layer: XOR-shared words, AND gates from dealt boolean
// triples, A2B (Kogge-Stone on the two components), B2A from dealt
// doubly-shared bits, and bit_dot in one round.
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

namespace {
RingTensor low_mask(const Shape& shape, int width) {
  return ring_filled(shape, width >= ring_bits ? ~Ring{0} : (Ring{1} << width) - 1);
}

// Two tensors as one flat one (two gates in one message), and part `which`
// of such a flat tensor back in `shape`.
RingTensor flat_pair(const RingTensor& a, const RingTensor& b) {
  return ring_concat_last(ring_reshape(a, {a.size()}), ring_reshape(b, {b.size()}));
}
RingTensor flat_part(const RingTensor& flat, std::size_t which, const Shape& shape) {
  const std::size_t n = element_count(shape);
  return ring_reshape(ring_slice_last(flat, which * n, (which + 1) * n), shape);
}

RingTensor low_bit(const RingTensor& t) {
  RingTensor out = t;
  for (auto& v : out) v &= 1;
  return out;
}
}  // namespace

// A boolean Beaver triple (u, v, w = u & v): open e = x ^ u and f = y ^ v
// (one message of 2n words each way), then x & y = w ^ (e & v) ^ (f & u)
// ^ (e & f), the last term at party 0.
Task<Add2Bits> Add2::and_gate(const RingTensor& x, const RingTensor& y) {
  const Shape s = shape_of(x);
  const std::size_t n = x.size();
  auto draw_word_mask = [&] {
    if (!dealer()) return draw(static_cast<int>(party_->id_), s);
    return ring_xor(draw(0, s), draw(1, s));
  };
  const RingTensor u = draw_word_mask(), v = draw_word_mask();
  RingTensor w = draw_first_share(s);
  if (dealer()) {
    send(1, ring_xor(ring_and(u, v), w));
    co_return Bits{ring_zeros(s)};
  }
  RingTensor mine = flat_pair(ring_xor(x, u), ring_xor(y, v));
  send(other(), mine);
  if (party_->id_ == 1) w = co_await dealt(s);
  const RingTensor theirs = co_await recv(other(), {2 * n});
  ring_xor_inplace(mine, theirs);
  const Ring *e = mine.data(), *f = mine.data() + n, *pu = u.data(), *pv = v.data();
  const bool first = party_->id_ == 0;
  for (std::size_t i = 0; i < n; ++i)
    w.data()[i] ^= (e[i] & pv[i]) ^ (f[i] & pu[i]) ^ (first ? e[i] & f[i] : 0);
  co_return Bits{std::move(w)};
}

Task<Add2Bits> Add2::bits_and(const Bits& x, const Bits& y) {
  require_same_shape(x.value, y.value, "add2 bits_and");
  return and_gate(x.value, y.value);
}

// x = x0 + x1: the sum's propagate bits x0 ^ x1 are the shares themselves,
// the generate bits x0 & x1 one gate; then Kogge-Stone as in rss3.
Task<Add2Bits> Add2::to_bits(const Share& a, int width) {
  if (width < 1 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument, "to_bits: width " + std::to_string(width) + " is outside [1, 64]");
  const Shape s = shape(a);
  const RingTensor mask = low_mask(s, width);
  const Bits propagate0{a.value};
  if (width == 1) co_return bits_and_public(propagate0, mask);
  const RingTensor zero = ring_zeros(s);
  Bits g = co_await and_gate(party_->id_ == 0 ? a.value : zero, party_->id_ == 1 ? a.value : zero);
  Bits p = propagate0;
  for (int d = 1; d < width; d *= 2) {
    if (2 * d >= width) {
      g = bits_xor(g, co_await bits_and(p, bits_shift_left(g, d)));
    } else {  // both gates of the level in one message
      const Bits both = co_await and_gate(flat_pair(p.value, p.value),
                                          flat_pair(bits_shift_left(g, d).value, bits_shift_left(p, d).value));
      g = bits_xor(g, Bits{flat_part(both.value, 0, s)});
      p = Bits{flat_part(both.value, 1, s)};
    }
  }
  co_return bits_and_public(bits_xor(propagate0, bits_shift_left(g, 1)), mask);
}

// A dealt bit r, XOR-shared (rb_i from k_i) and additively shared (party
// 0's from k0, party 1's dealt): open c = x ^ r (a byte per element), then
// x = c + r - 2 c r.
Task<Add2Share> Add2::bit_to_arith(const Bits& x) {
  const Shape s = shape(x);
  const RingTensor rb = low_bit(dealer() ? ring_xor(draw(0, s), draw(1, s)) : draw(static_cast<int>(party_->id_), s));
  RingTensor ra = draw_first_share(s);
  if (dealer()) {
    deal(rb, ra);
    co_return Share{ring_zeros(s), nullptr};
  }
  RingTensor c = low_bit(ring_xor(x.value, rb));
  send(other(), c, 1);
  if (party_->id_ == 1) ra = co_await dealt(s);
  ring_xor_inplace(c, co_await recv(other(), s, 1));
  const bool first = party_->id_ == 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Ring bit = c.data()[i] & 1;
    ra.data()[i] = (first ? bit : 0) + ra.data()[i] - 2 * bit * ra.data()[i];
  }
  co_return Share{std::move(ra), nullptr};
}

// sum_last b x in one round: with b = c ^ r (r a dealt bit, c opened) and
// x = F + U (U a fresh mask, F opened in the same message),
// b x = c x + (1 - 2c) r x and r x = r F + r U, where the dealer shares r
// and r U. Truncation (bits > 0) follows the sum.
Task<Add2Share> Add2::bit_dot(const Bits& b, const Share& x, int bits) {
  require_same_shape(b.value, x.value, "add2 bit_dot");
  check_bits(bits);
  const Shape s = shape(x);
  if (s.empty() || s.back() == 0)
    throw Error(ErrorCode::invalid_argument, "add2 bit_dot over an empty last axis, shape " + shape_string(s));
  const std::size_t n = x.value.size(), k = s.back();
  Shape out_shape = s;
  out_shape.back() = 1;
  const RingTensor rb = low_bit(dealer() ? ring_xor(draw(0, s), draw(1, s)) : draw(static_cast<int>(party_->id_), s));
  RingTensor ra = draw_first_share(s);
  const RingTensor u = draw_mask(s);
  RingTensor w = draw_first_share(s);
  RingTensor summed;
  if (dealer()) {
    send(1, flat_pair(ring_sub(rb, ra), ring_sub(ring_mul(rb, u), w)));
    summed = ring_zeros(out_shape);
  } else {
    RingTensor c = low_bit(ring_xor(b.value, rb));
    RingTensor f = ring_sub(x.value, u);
    send(other(), c, 1);
    send(other(), f);
    if (party_->id_ == 1) {
      const RingTensor both = co_await dealt({2 * n});
      ra = flat_part(both, 0, s);
      w = flat_part(both, 1, s);
    }
    ring_xor_inplace(c, co_await recv(other(), s, 1));
    ring_add_inplace(f, co_await recv(other(), s));
    RingTensor terms = RingTensor::from_shape(s);
    for (std::size_t i = 0; i < n; ++i) {
      const Ring bit = c.data()[i] & 1;
      terms.data()[i] = bit * x.value.data()[i] + (1 - 2 * bit) * (ra.data()[i] * f.data()[i] + w.data()[i]);
    }
    summed = ring_reshape(ring_weighted_sum_last(terms, std::vector<Ring>(k, Ring{1})), out_shape);
  }
  if (bits == 0) co_return Share{std::move(summed), nullptr};
  co_return co_await truncate(Share{std::move(summed), nullptr}, bits);
}

Task<RingTensor> Add2::reveal_bits(const Bits& x) {
  if (dealer()) co_return ring_zeros(shape(x));
  co_return ring_xor(co_await exchange(x.value), x.value);
}

}  // namespace mpcache
