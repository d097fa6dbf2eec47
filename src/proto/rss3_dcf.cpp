// rss3 msb_bits with comparisons = dcf: the sign from a distributed
// comparison function (Boyle et al. 2021, the MSB gate from a DCF) dealt by
// the party outside the pair that evaluates it.
//
// For the elements a call gives dealer D = L, party A = L+1 holds
// a = s_{L+1} + s_{L+2} and party B = L+2 holds b = s_L, so x = a + b.
// D draws r_A from the key it shares with A and r_B from the one it shares
// with B (so neither travels), r = r_A + r_B, and keys a DCF for
// [c' < r'] on m = w - 1 bits (r' = r mod 2^m), the tree roots from the
// same two keys. Round 1: A and B open c = x + r mod 2^w to each other
// (ceil(w/8) bytes per element each way) while D sends both the keys'
// common corrections (dcf_correction_bytes(m, 1, n)) and B also r_m ^ t_A
// (a second message), t_A a bit from D's key with A. Since x = c - r borrows out of the low m
// bits exactly when c' < r',
//   msb(x) = c_m ^ r_m ^ [c' < r'] = e_A ^ e_B,
//   e_A = c_m ^ t_A ^ (A's DCF output), e_B = r_m ^ t_A ^ (B's DCF output).
// Round 2 turns that 2-of-2 XOR sharing into rss3's replicated form
// (b_L, b_{L+1}, b_{L+2}), party i holding (b_i, b_{i+1}): D's two
// components come from its keys (b_L with B, b_{L+1} with A) and need no
// message; A sends e_A ^ b_{L+1} to B and B sends e_B ^ b_L to A, and both
// then hold b_{L+2} = msb ^ b_L ^ b_{L+1} (ceil(n/8) bytes each way).
// Two rounds is the least for this form: D's components cannot depend on
// c, which it never sees, so b_{L+2} needs both e_A and e_B.
//
// Who sees what: D receives nothing in the whole call, so it never sees c.
// A sees c (uniform, masked by r_B, which only D and B know), its DCF key
// (which hides r' and reveals nothing of the comparison's result), the bit
// r_m ^ t_A goes to B, not A, and B's e_B ^ b_L, masked by b_L which A does
// not hold; B likewise (r_A, its key, r_m ^ t_A masked by t_A, e_A ^
// b_{L+1}). Semi-honest, honest majority, as the rest of rss3.
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

namespace {

std::size_t words_for(std::size_t n) { return (n + 63) / 64; }
std::size_t bytes_for(std::size_t n) { return (n + 7) / 8; }

// Two PRG words per 128-bit tree root.
std::vector<DcfSeed> tree_roots(const RingTensor& words) {
  std::vector<DcfSeed> roots(words.size() / 2);
  for (std::size_t k = 0; k < roots.size(); ++k) roots[k] = {words.data()[2 * k], words.data()[2 * k + 1]};
  return roots;
}

// Bits of n elements packed 64 to a word (element e: bit e % 64 of word
// e / 64), as ceil(n/8) bytes and back.
void put_bits(const RingTensor& words, std::size_t n, std::byte* out) {
  for (std::size_t i = 0; i < bytes_for(n); ++i)
    out[i] = static_cast<std::byte>((words.data()[i / 8] >> (8 * (i % 8))) & 0xFF);
}
RingTensor get_bits(std::span<const std::byte> in, std::size_t n) {
  RingTensor words = ring_zeros({words_for(n)});
  for (std::size_t i = 0; i < bytes_for(n); ++i)
    words.data()[i / 8] |= std::to_integer<Ring>(in[i]) << (8 * (i % 8));
  if (n % 64 != 0) words.data()[n / 64] &= (Ring{1} << (n % 64)) - 1;
  return words;
}

}  // namespace

Task<Rss3Bits> Rss3::msb_dcf(PartyId dealer, RingTensor values, std::size_t n, int width) {
  const PartyId id = party_->id_;
  const PartyId first = (dealer + 1) % 3, second = (dealer + 2) % 3;  // A and B
  const int m = width - 1;
  const Ring low = (Ring{1} << m) - 1;  // m <= 63
  const std::size_t words = words_for(n);
  // Draw order, the same at both ends of each key: with A (D's next key,
  // A's previous) r_A, A's roots, t_A, b_{L+1}; with B (D's previous, B's
  // next) r_B, B's roots, b_L.
  if (id == dealer) {
    const RingTensor r_a = draw_next({n}), roots_a = draw_next({2 * n}), t_a = draw_next({words}),
                     b_next = draw_next({words});
    const RingTensor r_b = draw_prev({n}), roots_b = draw_prev({2 * n}), b_own = draw_prev({words});
    std::vector<Ring> alpha(n);
    RingTensor top = ring_zeros({words});  // r_m ^ t_A, packed
    for (std::size_t e = 0; e < n; ++e) {
      const Ring r = r_a.data()[e] + r_b.data()[e];
      alpha[e] = r & low;
      top.data()[e / 64] |= ((r >> m) & 1) << (e % 64);
    }
    ring_xor_inplace(top, t_a);
    std::vector<std::byte> keys =
        dcf_serialize(dcf_generate(m, 1, alpha, 1, tree_roots(roots_a), tree_roots(roots_b)));
    // B's bits go as a message of their own in the same round, so the keys
    // (the bulk: a large batch's can be gigabytes) are copied once, not twice.
    std::vector<std::byte> top_bytes(bytes_for(n));
    put_bits(top, n, top_bytes.data());
    party_->dealt_bytes_ += 2 * keys.size() + top_bytes.size();
    party_->endpoint_->send(first, stream_, keys, tag_);
    party_->endpoint_->send(second, stream_, std::move(keys), tag_);
    party_->endpoint_->send(second, stream_, std::move(top_bytes), tag_);
    co_return Bits{std::move(b_own), std::move(b_next)};
  }
  const bool is_first = id == first;
  const PartyId other = is_first ? second : first;
  const RingTensor r_mine = is_first ? draw_prev({n}) : draw_next({n});
  const std::vector<DcfSeed> root = tree_roots(is_first ? draw_prev({2 * n}) : draw_next({2 * n}));
  const RingTensor t_a = is_first ? draw_prev({words}) : RingTensor{};
  // A's b_{L+1} or B's b_L: the component it shares with the dealer.
  RingTensor with_dealer = is_first ? draw_prev({words}) : draw_next({words});

  RingTensor c = ring_add(values, r_mine);
  send(other, c, width);
  const std::string from = "rss3 party " + std::to_string(id) + " msb_bits (dcf): the dealer (party " +
                           std::to_string(dealer) + ")";
  // The keys' message is dropped once read: only the parsed keys stay.
  const DcfCorrections keys = dcf_deserialize(co_await party_->endpoint_->recv(dealer, stream_, tag_), m, 1, n, from);
  RingTensor top;  // B: r_m ^ t_A
  if (!is_first) {
    const auto bits = co_await party_->endpoint_->recv(dealer, stream_, tag_);
    if (bits.size() != bytes_for(n))
      throw Error(ErrorCode::protocol, from + " sent " + std::to_string(bits.size()) + " bytes of mask bits, expected " +
                                           std::to_string(bytes_for(n)) + " for " + std::to_string(n) + " elements");
    top = get_bits(bits, n);
  }
  ring_add_inplace(c, co_await recv(other, {n}, width));
  std::vector<Ring> c_low(n);
  for (std::size_t e = 0; e < n; ++e) c_low[e] = c.data()[e] & low;
  const std::vector<Ring> below = dcf_evaluate(is_first ? 0 : 1, keys, root, c_low);
  // e_A or e_B, packed.
  RingTensor mine = is_first ? t_a : std::move(top);
  for (std::size_t e = 0; e < n; ++e) {
    Ring bit = below[e];
    if (is_first) bit ^= (c.data()[e] >> m) & 1;
    mine.data()[e / 64] ^= bit << (e % 64);
  }
  ring_xor_inplace(mine, with_dealer);
  std::vector<std::byte> out(bytes_for(n));
  put_bits(mine, n, out.data());
  party_->endpoint_->send(other, stream_, std::move(out), tag_);
  const auto theirs = co_await party_->endpoint_->recv(other, stream_, tag_);
  if (theirs.size() != bytes_for(n))
    throw Error(ErrorCode::protocol, "rss3 party " + std::to_string(id) + " msb_bits (dcf): party " +
                                         std::to_string(other) + " sent " + std::to_string(theirs.size()) +
                                         " bytes of result bits, expected " + std::to_string(bytes_for(n)));
  ring_xor_inplace(mine, get_bits(theirs, n));  // b_{L+2}
  if (is_first) co_return Bits{std::move(with_dealer), std::move(mine)};
  co_return Bits{std::move(mine), std::move(with_dealer)};
}

}  // namespace mpcache
