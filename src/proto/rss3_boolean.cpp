// rss3 boolean layer: XOR-shared words, AND gates, A2B (carry-save +
// Kogge-Stone), B2A of single bits and bit_dot (B2A fused with a product).
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

namespace {
RingTensor low_mask(const Shape& shape, int width) {
  RingTensor m = RingTensor::from_shape(shape);
  const Ring mask = width >= ring_bits ? ~Ring{0} : (Ring{1} << width) - 1;
  std::fill(m.begin(), m.end(), mask);
  return m;
}

// Two tensors of one shape as one flat tensor, so that two gates share a message.
RingTensor concat(const RingTensor& a, const RingTensor& b) {
  RingTensor out = RingTensor::from_shape({a.size() + b.size()});
  std::copy(a.begin(), a.end(), out.begin());
  std::copy(b.begin(), b.end(), out.begin() + static_cast<std::ptrdiff_t>(a.size()));
  return out;
}

RingTensor half(const RingTensor& flat, std::size_t which, const Shape& shape) {
  RingTensor out = RingTensor::from_shape(shape);
  const std::size_t n = out.size();
  std::copy(flat.begin() + static_cast<std::ptrdiff_t>(which * n),
            flat.begin() + static_cast<std::ptrdiff_t>((which + 1) * n), out.begin());
  return out;
}

Rss3Bits join(const Rss3Bits& a, const Rss3Bits& b) {
  return {concat(a.own, b.own), concat(a.next, b.next)};
}
Rss3Bits part(const Rss3Bits& flat, std::size_t which, const Shape& shape) {
  return {half(flat.own, which, shape), half(flat.next, which, shape)};
}
}  // namespace

// z_i = x_i y_i ^ x_i y_{i+1} ^ x_{i+1} y_i ^ (F(k_i) ^ F(k_{i-1})), then resharing.
Task<Rss3Bits> Rss3::bits_and(const Bits& x, const Bits& y) {
  require_same_shape(x.own, y.own, "rss3 bits_and");
  const Shape s = shape(x);
  RingTensor z = RingTensor::from_shape(s);
  const Ring *x0 = x.own.data(), *x1 = x.next.data(), *y0 = y.own.data(), *y1 = y.next.data();
  RingTensor r_next = draw_next(s), r_prev = draw_prev(s);
  for (std::size_t i = 0; i < z.size(); ++i)
    z.data()[i] = (x0[i] & (y0[i] ^ y1[i])) ^ (x1[i] & y0[i]) ^ r_next.data()[i] ^ r_prev.data()[i];
  Share r = co_await reshare(std::move(z));
  co_return Bits{std::move(r.own), std::move(r.next)};
}

// sum_last b x in two rounds, where B2A and then the product took three.
// Round 1, one message: t = b0 ^ b1 = b0 + b1 - 2 b0 b1 and y = b2 x. Round
// 2: b x = (t ^ b2) x = y + t (x - 2y), one product whose local terms take
// y's own component and are summed over the last axis before the reshare
// (which truncates when bits > 0).
Task<Rss3Share> Rss3::bit_dot(const Bits& b, const Share& x, int bits) {
  require_same_shape(b.own, x.own, "rss3 bit_dot");
  check_bits(bits);
  const Shape s = shape(x);
  if (s.empty() || s.back() == 0)
    throw Error(ErrorCode::invalid_argument, "rss3 bit_dot over an empty last axis, shape " + shape_string(s));
  const std::size_t k = s.back(), n = x.own.size();
  const PartyId i = party_->id_, i_next = (i + 1) % 3;
  // Round 1 multiplies (b0, b2) by (b1, x), flat, in one message. Party i
  // holds bit components i (own) and i + 1 (next); the others are 0 here.
  // Written as one loop: a sort layer's select is mostly this bookkeeping.
  Share left{RingTensor::from_shape({2 * n}), RingTensor::from_shape({2 * n})};
  Share right{RingTensor::from_shape({2 * n}), RingTensor::from_shape({2 * n})};
  for (std::size_t q = 0; q < n; ++q) {
    const Ring own = b.own.data()[q] & 1, next = b.next.data()[q] & 1;
    left.own.data()[q] = i == 0 ? own : 0;  // b0
    left.next.data()[q] = i_next == 0 ? next : 0;
    left.own.data()[n + q] = i == 2 ? own : 0;  // b2
    left.next.data()[n + q] = i_next == 2 ? next : 0;
    right.own.data()[q] = i == 1 ? own : 0;  // b1
    right.next.data()[q] = i_next == 1 ? next : 0;
    right.own.data()[n + q] = x.own.data()[q];
    right.next.data()[n + q] = x.next.data()[q];
  }
  const Share both = co_await mul(left, right);  // (b0 b1, y = b2 x)
  // Round 2's local terms: t = b0 + b1 - 2 b0 b1, u = x - 2y, z = t u + y
  // (y's own component), summed over the last axis.
  Shape out_shape = s;
  out_shape.back() = 1;
  RingTensor summed = ring_zeros(out_shape);
  for (std::size_t q = 0; q < n; ++q) {
    const Ring b01_own = both.own.data()[q], b01_next = both.next.data()[q];
    const Ring y_own = both.own.data()[n + q], y_next = both.next.data()[n + q];
    const Ring t_own = left.own.data()[q] + right.own.data()[q] - 2 * b01_own;
    const Ring t_next = left.next.data()[q] + right.next.data()[q] - 2 * b01_next;
    const Ring u_own = x.own.data()[q] - 2 * y_own, u_next = x.next.data()[q] - 2 * y_next;
    summed.data()[q / k] += t_own * (u_own + u_next) + t_next * u_own + y_own;
  }
  ring_add_inplace(summed, zero_share(out_shape));
  if (bits > 0) co_return co_await reshare_truncated(std::move(summed), bits);
  co_return co_await reshare(std::move(summed));
}

Task<RingTensor> Rss3::reveal_bits(const Bits& x) {
  send(next_id(), x.own);
  RingTensor missing = co_await recv(prev_id(), shape(x));
  ring_xor_inplace(missing, x.own);
  ring_xor_inplace(missing, x.next);
  co_return missing;
}

// Party i holds (s_i, s_{i+1}); component j as a sharing with b_j = s_j, others 0.
Rss3Bits Rss3::component_bits(const Share& a, PartyId j) const {
  const PartyId i = party_->id_;
  const Shape s = shape(a);
  return {i == j ? a.own : ring_zeros(s), (i + 1) % 3 == j ? a.next : ring_zeros(s)};
}

Rss3Share Rss3::component_arith(const Share& a, PartyId j) const {
  const PartyId i = party_->id_;
  const Shape s = shape(a);
  return {i == j ? a.own : ring_zeros(s), (i + 1) % 3 == j ? a.next : ring_zeros(s)};
}

Task<Rss3Bits> Rss3::to_bits(const Share& a, int width) {
  if (width < 1 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "to_bits: width " + std::to_string(width) + " is outside [1, 64]");
  const Shape s = shape(a);
  // Carry-save: s0 + s1 + s2 = sum + 2 carry, sum = s0^s1^s2 (the shares
  // themselves), carry = maj(s0, s1, s2) = ((s0^s2) & (s1^s2)) ^ s2.
  const Bits sum{a.own, a.next};
  const RingTensor mask = low_mask(s, width);
  if (width == 1) co_return bits_and_public(sum, mask);
  const Bits b2 = component_bits(a, 2);
  Bits carry = co_await bits_and(bits_xor(component_bits(a, 0), b2),
                                 bits_xor(component_bits(a, 1), b2));
  carry = bits_shift_left(bits_xor(carry, b2), 1);
  // Kogge-Stone on sum + carry: generate G, propagate P, prefix over 2^k spans.
  const Bits propagate0 = bits_xor(sum, carry);
  Bits g = co_await bits_and(sum, carry);
  Bits p = propagate0;
  for (int d = 1; d < width; d *= 2) {
    const bool last = 2 * d >= width;
    if (last) {
      g = bits_xor(g, co_await bits_and(p, bits_shift_left(g, d)));
    } else {  // both gates of the level in one message
      Bits both = co_await bits_and(join(p, p), join(bits_shift_left(g, d), bits_shift_left(p, d)));
      g = bits_xor(g, part(both, 0, s));
      p = part(both, 1, s);
    }
  }
  co_return bits_and_public(bits_xor(propagate0, bits_shift_left(g, 1)), mask);
}

// b = t ^ b2 with t = b0 ^ b1 at party 0 and b2 at parties 1 and 2:
// b = b2 + t y, y = 1 - 2 b2. Round 1: party 0 sends t - r to party 1 (r
// from its key with party 2), so that party 1 holds alpha = (t - r) y + b2
// and party 2 beta = r y, alpha + beta = b. Round 2: they reshare it as
// (sigma, rho, b - sigma - rho), sigma from the key of parties 2 and 0,
// rho from that of parties 0 and 1 (party 2's message needs nothing from
// round 1 and goes out at once). With result_bits < 64 only the low bytes
// travel, and parties 1 and 2 keep the low result_bits of the component
// they share, so that both hold the same word.
Task<Rss3Share> Rss3::bit_to_arith(const Bits& x, int result_bits) {
  if (result_bits < 1 || result_bits > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "rss3 bit_to_arith: result bits " + std::to_string(result_bits) + " outside [1, 64]");
  const Shape s = shape(x);
  const std::size_t n = x.own.size();
  const Ring low = result_bits >= ring_bits ? ~Ring{0} : (Ring{1} << result_bits) - 1;
  auto joined = [&](RingTensor theirs, const RingTensor& part) {
    ring_add_inplace(theirs, part);
    if (result_bits < ring_bits)
      for (auto& v : theirs) v &= low;
    return theirs;
  };
  switch (party_->id_) {
    case 0: {
      RingTensor masked = draw_prev(s);
      for (std::size_t i = 0; i < n; ++i)
        masked.data()[i] = ((x.own.data()[i] ^ x.next.data()[i]) & 1) - masked.data()[i];
      send(1, masked, result_bits);
      RingTensor sigma = draw_prev(s), rho = draw_next(s);
      co_return Share{std::move(sigma), std::move(rho)};
    }
    case 1: {
      const RingTensor masked = co_await recv(0, s, result_bits);
      RingTensor rho = draw_prev(s);
      RingTensor part = RingTensor::from_shape(s);
      for (std::size_t i = 0; i < n; ++i) {
        const Ring b2 = x.next.data()[i] & 1;
        part.data()[i] = masked.data()[i] * (1 - 2 * b2) + b2 - rho.data()[i];
      }
      send(2, part, result_bits);
      co_return Share{std::move(rho), joined(co_await recv(2, s, result_bits), part)};
    }
    default: {
      const RingTensor r = draw_next(s);
      RingTensor sigma = draw_next(s);
      RingTensor part = RingTensor::from_shape(s);
      for (std::size_t i = 0; i < n; ++i) {
        const Ring b2 = x.own.data()[i] & 1;
        part.data()[i] = r.data()[i] * (1 - 2 * b2) - sigma.data()[i];
      }
      send(1, part, result_bits);
      co_return Share{joined(co_await recv(1, s, result_bits), part), std::move(sigma)};
    }
  }
}

}  // namespace mpcache
