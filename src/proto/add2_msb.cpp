// add2 msb_bits: the sign of a mod 2^w as a comparison between the two
// parties' own values, on bit planes packed 64 elements to a word.
//
// With x = x0 + x1 and m = w - 1, the sign is x0[m] ^ x1[m] ^ c, where c
// is the carry into bit m of A + C (A, C: the low m bits of x0, x1). Party
// 0 holds A and party 1 holds C whole, so the propagate bits A ^ C are
// already XOR-shared, and the generate bits A & C take one AND of private
// inputs: each party sends one masked bit per position. A tree then
// combines adjacent groups, G = G_hi ^ (P_hi & G_lo), P = P_hi & P_lo (the
// lowest group's P is never needed), all gates of a level in one message.
// Rounds: 1 + ceil(log2 m) (7 at w = 64, 6 at w = 27). Per element and
// party: m bits, then 2 bits per gate of the tree (2 pairs - 1 gates per
// level): 299 bits (37.4 bytes) at w = 64, 116 (14.5 bytes) at w = 27, where
// A2B on whole words sends 24 words (192 bytes). Elements pack 64 to a word
// (n not a multiple of 64 pays for the whole last word). Offline: one
// correction bit per bit sent by one party.
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

// A & C for A held whole by party 0 and C by party 1: party 0 sends
// e = A ^ u, party 1 sends f = C ^ v (u, v its masks, w = u & v dealt);
// then A & C = (A & f) ^ (e & v) ^ (u & v).
Task<Add2Bits> Add2::private_and(const RingTensor& mine) {
  const Shape s = shape_of(mine);
  if (dealer()) {
    const RingTensor u = draw(0, s), v = draw(1, s), w0 = draw(0, s);
    send(1, ring_xor(ring_and(u, v), w0));
    co_return Bits{ring_zeros(s)};
  }
  const RingTensor mask = draw(static_cast<int>(party_->id_), s);
  RingTensor w = draw_first_share(s);
  send(other(), ring_xor(mine, mask));
  if (party_->id_ == 1) w = co_await dealt(s);
  const RingTensor theirs = co_await recv(other(), s);
  // Party 0: A & f; party 1: e & v.
  ring_xor_inplace(w, ring_and(party_->id_ == 0 ? mine : mask, theirs));
  co_return Bits{std::move(w)};
}

Task<Add2Bits> Add2::msb_bits(const Share& a, int width) {
  if (width < 2 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument, "add2 msb_bits: width " + std::to_string(width) + " is outside [2, 64]");
  if (party_->options_.comparisons == Add2Comparisons::dcf) return msb_dcf(a, width);
  return msb_circuit(a, width);
}

Task<Add2Bits> Add2::msb_circuit(const Share& a, int width) {
  const Shape s = shape(a);
  const std::size_t n = a.value.size(), m = static_cast<std::size_t>(width - 1), words = (n + 63) / 64;
  // Plane j (bit j of every element), `words` words each.
  RingTensor planes = ring_zeros({m * words});
  if (!dealer())
    for (std::size_t e = 0; e < n; ++e) {
      const Ring v = a.value.data()[e];
      for (std::size_t j = 0; j < m; ++j) planes.data()[j * words + e / 64] |= ((v >> j) & 1) << (e % 64);
    }
  RingTensor g = (co_await private_and(planes)).value;
  RingTensor p = std::move(planes);  // A ^ C: party 0 holds A, party 1 holds C
  for (std::size_t groups = m; groups > 1;) {
    const std::size_t pairs = groups / 2;
    // Left operands: P_hi of every pair, then P_hi of every pair but the
    // lowest; right: G_lo, then P_lo.
    RingTensor left = RingTensor::from_shape({(2 * pairs - 1) * words});
    RingTensor right = RingTensor::from_shape({(2 * pairs - 1) * words});
    for (std::size_t k = 0; k < pairs; ++k) {
      const Ring* p_hi = p.data() + (2 * k + 1) * words;
      std::copy(p_hi, p_hi + words, left.data() + k * words);
      std::copy(g.data() + 2 * k * words, g.data() + (2 * k + 1) * words, right.data() + k * words);
      if (k == 0) continue;
      std::copy(p_hi, p_hi + words, left.data() + (pairs + k - 1) * words);
      std::copy(p.data() + 2 * k * words, p.data() + (2 * k + 1) * words, right.data() + (pairs + k - 1) * words);
    }
    const RingTensor gates = (co_await and_gate(left, right)).value;
    const std::size_t next = pairs + groups % 2;
    RingTensor g_next = ring_zeros({next * words}), p_next = ring_zeros({next * words});
    for (std::size_t k = 0; k < pairs; ++k)
      for (std::size_t i = 0; i < words; ++i) {
        g_next.data()[k * words + i] = g.data()[(2 * k + 1) * words + i] ^ gates.data()[k * words + i];
        if (k > 0) p_next.data()[k * words + i] = gates.data()[(pairs + k - 1) * words + i];
      }
    if (groups % 2 == 1) {  // the top group has no partner: it moves up as it is
      std::copy(g.data() + (groups - 1) * words, g.data() + groups * words, g_next.data() + pairs * words);
      std::copy(p.data() + (groups - 1) * words, p.data() + groups * words, p_next.data() + pairs * words);
    }
    g = std::move(g_next);
    p = std::move(p_next);
    groups = next;
  }
  // The sign: the carry into bit m, XOR this party's own bit m.
  RingTensor out = RingTensor::from_shape(s);
  for (std::size_t e = 0; e < n; ++e) {
    Ring bit = (g.data()[e / 64] >> (e % 64)) & 1;
    if (!dealer()) bit ^= (a.value.data()[e] >> m) & 1;
    out.data()[e] = bit;
  }
  co_return Bits{std::move(out)};
}

}  // namespace mpcache
