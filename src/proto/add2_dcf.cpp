// add2 msb_bits with comparisons = dcf: one round online (Boyle et al.
// 2021, the MSB / less-than gate from a DCF).
//
// For each element the dealer draws a mask r = r0 + r1 (r_i from the key k_i
// it shares with party i, so r_i never travels) and keys a DCF for
// [c' < r'] on m = w - 1 bits, r' = r mod 2^m. The parties open c = x + r
// mod 2^w (each sends its component's low w bits: one round) and evaluate.
// With c', r' the low m bits and c_m, r_m bit m of c and r, x = c - r
// borrows out of the low m bits exactly when c' < r', so
//   msb(x) = c_m ^ r_m ^ [c' < r'].
// Party 0 adds c_m; r_m is XOR-shared (party 0's bit from k0, party 1's in
// the dealer's message); the DCF's outputs are XOR shares (group Z_2).
//
// Dealer to each party: the common DCF corrections,
// dcf_correction_bytes(m, 1, n); party 1 also ceil(n/8) bytes of r_m
// shares. The tree roots come from k0 and k1. Online: ceil(w/8) bytes per
// element each way. The dealer receives nothing, so it never sees c; each
// party sees c, uniform mod 2^w because of the other party's r_j, and its
// DCF key, which hides r' (docs/protocols.md).
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

namespace {

// Two PRG words per 128-bit tree root.
std::vector<DcfSeed> roots_of(const RingTensor& words) {
  std::vector<DcfSeed> roots(words.size() / 2);
  for (std::size_t k = 0; k < roots.size(); ++k) roots[k] = {words.data()[2 * k], words.data()[2 * k + 1]};
  return roots;
}

std::size_t packed_bit_bytes(std::size_t n) { return (n + 7) / 8; }

}  // namespace

Task<Add2Bits> Add2::msb_dcf(const Share& a, int width) {
  const Shape s = shape(a);
  const std::size_t n = a.value.size();
  const int m = width - 1;
  const Ring low = (Ring{1} << m) - 1;  // m <= 63
  RingTensor r = draw_mask(s);          // r_i here; the dealer: r
  const RingTensor top0 = draw_first_share(s);  // bit 0: party 0's share of r_m
  if (dealer()) {
    const std::vector<DcfSeed> root0 = roots_of(draw(0, {2 * n})), root1 = roots_of(draw(1, {2 * n}));
    std::vector<Ring> alpha(n);
    for (std::size_t e = 0; e < n; ++e) alpha[e] = r.data()[e] & low;
    std::vector<std::byte> keys = dcf_serialize(dcf_generate(m, 1, alpha, 1, root0, root1));
    std::vector<std::byte> second = keys;
    const std::size_t at = second.size();
    second.resize(at + packed_bit_bytes(n));
    for (std::size_t e = 0; e < n; ++e)
      if (((r.data()[e] >> m) ^ top0.data()[e]) & 1) second[at + e / 8] |= std::byte{1} << (e % 8);
    party_->endpoint_->send(0, stream_, std::move(keys), tag_);
    party_->endpoint_->send(1, stream_, std::move(second), tag_);
    co_return Bits{ring_zeros(s)};
  }
  const PartyId id = party_->id_;
  const std::vector<DcfSeed> root = roots_of(draw(static_cast<int>(id), {2 * n}));
  RingTensor c = ring_add(a.value, r);
  send(other(), c, width);
  const auto message = co_await party_->endpoint_->recv(add2_dealer, stream_, tag_);
  const std::size_t key_bytes = dcf_correction_bytes(m, 1, n);
  const std::size_t want = key_bytes + (id == 1 ? packed_bit_bytes(n) : 0);
  const std::string from = "add2 party " + std::to_string(id) + " msb_bits (dcf): the dealer (party 2)";
  if (message.size() != want)
    throw Error(ErrorCode::protocol, from + " sent " + std::to_string(message.size()) + " bytes, expected " +
                                         std::to_string(want) + " for " + std::to_string(n) + " elements of " +
                                         std::to_string(width) + " bits");
  const DcfCorrections keys =
      dcf_deserialize(std::span<const std::byte>(message).first(key_bytes), m, 1, n, from);
  ring_add_inplace(c, co_await recv(other(), s, width));
  std::vector<Ring> c_low(n);
  for (std::size_t e = 0; e < n; ++e) c_low[e] = c.data()[e] & low;
  const std::vector<Ring> below = dcf_evaluate(static_cast<int>(id), keys, root, c_low);
  RingTensor out = RingTensor::from_shape(s);
  for (std::size_t e = 0; e < n; ++e) {
    Ring bit = below[e];
    if (id == 0) bit ^= ((c.data()[e] >> m) ^ top0.data()[e]) & 1;
    else bit ^= std::to_integer<Ring>(message[key_bytes + e / 8] >> (e % 8)) & 1;
    out.data()[e] = bit;
  }
  co_return Bits{std::move(out)};
}

}  // namespace mpcache
