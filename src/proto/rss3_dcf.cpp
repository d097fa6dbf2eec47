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
// Offline store (Rss3Options::offline_budget > 0): D may serve a call's
// first k elements from correlations it dealt ahead (deal_ahead, below; masks
// r* it keeps, keys A and B keep in their Rss3DcfStore). The openings still
// use the call's masks r, so A and B need not know which correlations before
// they open; D sends both, in the opening's round, a header (the number of
// the first correlation and k: 16 bytes) and delta = r - r* mod 2^w
// (ceil(w/8) bytes per element), and they evaluate the stored keys at
// c* = c - delta = x + r*. D alone picks the correlations, so concurrent calls
// need no agreed order. The rest, [k, n), is dealt inline as above, in slices
// of rss3_dcf_slice_elements: D sends two at once and each further one after
// A and B acknowledged (one byte each) the slice two before it, so a
// receiver holds at most two slices of keys; S slices take 2 + 2
// floor((S - 1) / 2) rounds.
//
// Who sees what: D receives nothing in the whole call, so it never sees c.
// A sees c (uniform, masked by r_B, which only D and B know), its DCF key
// (which hides r' and reveals nothing of the comparison's result), the bit
// r_m ^ t_A goes to B, not A, and B's e_B ^ b_L, masked by b_L which A does
// not hold; B likewise (r_A, its key, r_m ^ t_A masked by t_A, e_A ^
// b_{L+1}). With the store A also sees delta = r - r*: with c it gives
// x + r*, masked by r*, which its stored key hides as a fresh key's would; c
// itself stays masked by r_B. D still receives nothing but one-byte
// acknowledgements. Semi-honest, honest majority, as the rest of rss3.
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

namespace {

std::size_t words_for(std::size_t n) { return (n + 63) / 64; }
std::size_t bytes_for(std::size_t n) { return (n + 7) / 8; }
Ring bit_of(const Ring* words, std::size_t e) { return (words[e / 64] >> (e % 64)) & 1; }

// Two PRG words per 128-bit tree root.
std::vector<DcfSeed> tree_roots(const RingTensor& words) {
  std::vector<DcfSeed> roots(words.size() / 2);
  for (std::size_t k = 0; k < roots.size(); ++k) roots[k] = {words.data()[2 * k], words.data()[2 * k + 1]};
  return roots;
}

// Bits of n elements packed 64 to a word (element e: bit e % 64 of word
// e / 64), as ceil(n/8) bytes and back.
std::vector<std::byte> put_bits(const std::vector<Ring>& words, std::size_t n) {
  std::vector<std::byte> out(bytes_for(n));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>((words[i / 8] >> (8 * (i % 8))) & 0xFF);
  return out;
}
std::vector<Ring> get_bits(std::span<const std::byte> in, std::size_t n, const std::string& from) {
  if (in.size() != bytes_for(n))
    throw Error(ErrorCode::protocol, from + " sent " + std::to_string(in.size()) + " bytes of bits, expected " +
                                         std::to_string(bytes_for(n)) + " for " + std::to_string(n) + " elements");
  std::vector<Ring> words(words_for(n), 0);
  for (std::size_t i = 0; i < in.size(); ++i) words[i / 8] |= std::to_integer<Ring>(in[i]) << (8 * (i % 8));
  if (n % 64 != 0) words[n / 64] &= (Ring{1} << (n % 64)) - 1;
  return words;
}

// The dealer's messages for masks r: the keys for beta [c' < r mod 2^(w-1)]
// (both receivers') and B's part of the top bit r_{w-1}. Bit output: beta =
// 1 and B's bits r_{w-1} ^ t_A (t_A of element k: bit t_offset + k of
// t_a). Arithmetic output: beta = 1 - 2 r_{w-1} (so the DCF yields r_{w-1}
// ^ [c' < r'] less r_{w-1}) and B's offsets r_{w-1} - rho (8 bytes each),
// rho of element k being word t_offset + k of t_a, A's part.
struct Deal {
  std::vector<std::byte> keys, top;
};
Deal make_deal(int width, std::span<const Ring> r, std::span<const DcfSeed> roots_a, std::span<const DcfSeed> roots_b,
               const Ring* t_a, std::size_t t_offset, Rss3DcfOutput output) {
  const int m = width - 1;
  const Ring low = (Ring{1} << m) - 1;
  std::vector<Ring> alpha(r.size());
  for (std::size_t k = 0; k < r.size(); ++k) alpha[k] = r[k] & low;
  if (output == Rss3DcfOutput::arith) {
    std::vector<Ring> beta(r.size()), offset(r.size());
    for (std::size_t k = 0; k < r.size(); ++k) {
      const Ring top_bit = (r[k] >> m) & 1;
      beta[k] = Ring{1} - 2 * top_bit;
      offset[k] = top_bit - t_a[t_offset + k];
    }
    std::vector<std::byte> top(8 * r.size());
    std::memcpy(top.data(), offset.data(), top.size());
    return {dcf_serialize(dcf_generate(m, ring_bits, alpha, beta, roots_a, roots_b)), std::move(top)};
  }
  std::vector<Ring> top(words_for(r.size()), 0);
  for (std::size_t k = 0; k < r.size(); ++k) top[k / 64] |= (((r[k] >> m) & 1) ^ bit_of(t_a, t_offset + k)) << (k % 64);
  return {dcf_serialize(dcf_generate(m, 1, alpha, 1, roots_a, roots_b)), put_bits(top, r.size())};
}

// B's offsets of an arithmetic deal (8 bytes an element).
std::vector<Ring> get_offsets(std::span<const std::byte> in, std::size_t n, const std::string& from) {
  if (in.size() != 8 * n)
    throw Error(ErrorCode::protocol, from + " sent " + std::to_string(in.size()) + " bytes of offsets, expected " +
                                         std::to_string(8 * n) + " for " + std::to_string(n) + " elements");
  std::vector<Ring> out(n);
  std::memcpy(out.data(), in.data(), in.size());
  return out;
}

// The store header: the number of the first stored correlation and how many.
std::vector<std::byte> put_header(std::uint64_t start, std::uint64_t k) {
  std::vector<std::byte> out(16);
  std::memcpy(out.data(), &start, 8);
  std::memcpy(out.data() + 8, &k, 8);
  return out;
}

void note_store(Rss3DcfStats& stats, const Rss3DcfStore& store, PartyId id) {
  stats.store_bytes = store.held_by(id);
  stats.store_peak = std::max(stats.store_peak, stats.store_bytes);
}

}  // namespace

std::size_t rss3_dcf_slice_elements(int width, std::uint64_t slice_bytes, Rss3DcfOutput output) {
  const std::uint64_t per = output == Rss3DcfOutput::arith ? dcf_correction_bytes(width - 1, ring_bits, 64) / 64 + 8
                                                           : dcf_correction_bytes(width - 1, 1, 64) / 64 + 1;
  return std::max<std::size_t>(64, static_cast<std::size_t>(slice_bytes / per) / 64 * 64);
}

std::uint64_t rss3_dcf_stored_bytes(int slot) {
  const auto width = static_cast<std::uint64_t>(rss3_dcf_slot_width(slot));
  if (rss3_dcf_slot_output(slot) == Rss3DcfOutput::arith)  // 8 bytes a level and the final value; rho or the offset
    return sizeof(DcfSeed) + 16 * (width - 1) + 8 * width + 8;
  return sizeof(DcfSeed) + 16 * (width - 1) + (width + 8) / 8;
}

Task<std::pair<RingTensor, RingTensor>> Rss3::dcf_compare(PartyId dealer, RingTensor values, std::size_t n, int width,
                                                          Rss3DcfOutput output, int result_bits) {
  Rss3Party& party = *party_;
  const PartyId id = party.id_;
  const PartyId first = (dealer + 1) % 3, second = (dealer + 2) % 3;  // A and B
  const int m = width - 1;
  const Ring low = (Ring{1} << m) - 1;  // m <= 63
  const bool arith = output == Rss3DcfOutput::arith;
  const std::size_t words = words_for(n);
  // Per element: the result's components are bits (packed) or ring words,
  // and A's part of the top bit t_A a bit or rho a word.
  const std::size_t parts = arith ? n : words;
  const bool store_on = party.options_.offline_budget > 0;
  const int slot = rss3_dcf_slot(width, output);  // the store's name for this kind
  const std::size_t slice = rss3_dcf_slice_elements(width, party.options_.dcf_slice_bytes, output);
  party.dcf_stats_.demand[slot][dealer] += n;
  // Draw order, the same at both ends of each key: with A (D's next key,
  // A's previous) r_A, A's roots, t_A (or rho), b_{L+1}; with B (D's
  // previous, B's next) r_B, B's roots, b_L.
  if (id == dealer) {
    const RingTensor r_a = draw_next({n}), roots_a = draw_next({2 * n}), t_a = draw_next({parts}),
                     b_next = draw_next({parts});
    const RingTensor r_b = draw_prev({n}), roots_b = draw_prev({2 * n}), b_own = draw_prev({parts});
    const std::vector<DcfSeed> root_a = tree_roots(roots_a), root_b = tree_roots(roots_b);
    std::vector<Ring> r(n);
    for (std::size_t e = 0; e < n; ++e) r[e] = r_a.data()[e] + r_b.data()[e];
    std::size_t k = 0;  // elements served from the store
    if (store_on) {
      auto [start, masks] = party.store_->take_masks(slot, n);
      k = masks.size();
      party.endpoint_->send(first, stream_, put_header(start, k), tag_);
      party.endpoint_->send(second, stream_, put_header(start, k), tag_);
      if (k > 0) {
        RingTensor delta = RingTensor::from_shape({k});
        for (std::size_t e = 0; e < k; ++e) delta.data()[e] = r[e] - masks[e];
        send(first, delta, width);
        send(second, delta, width);
      }
      party.dcf_stats_.from_store += k;
      if (k < n) ++party.dcf_stats_.ran_dry;
      note_store(party.dcf_stats_, *party.store_, id);
    }
    // The rest inline, two slices in flight: slice j waits for the pair's
    // acknowledgements of slice j - 2.
    const std::size_t slices = (n - k + slice - 1) / slice;
    for (std::size_t j = 0; j < slices; ++j) {
      if (j >= 2) {
        (void)co_await party.endpoint_->recv(first, stream_, tag_);
        (void)co_await party.endpoint_->recv(second, stream_, tag_);
      }
      const std::size_t b = k + j * slice, e = std::min(n, b + slice);
      Deal deal = make_deal(width, std::span<const Ring>(r).subspan(b, e - b),
                            std::span<const DcfSeed>(root_a).subspan(b, e - b),
                            std::span<const DcfSeed>(root_b).subspan(b, e - b), t_a.data(), b, output);
      party.dealt_bytes_ += 2 * deal.keys.size() + deal.top.size();
      // B's bits go as a message of their own, so the keys are copied once, not twice.
      party.endpoint_->send(first, stream_, deal.keys, tag_);
      party.endpoint_->send(second, stream_, std::move(deal.keys), tag_);
      party.endpoint_->send(second, stream_, std::move(deal.top), tag_);
    }
    party.dcf_stats_.inline_elements += n - k;
    co_return std::pair{std::move(b_own), std::move(b_next)};
  }
  const bool is_first = id == first;
  const PartyId other = is_first ? second : first;
  const RingTensor r_mine = is_first ? draw_prev({n}) : draw_next({n});
  const std::vector<DcfSeed> root = tree_roots(is_first ? draw_prev({2 * n}) : draw_next({2 * n}));
  const RingTensor t_a = is_first ? draw_prev({parts}) : RingTensor{};
  // A's b_{L+1} or B's b_L: the component it shares with the dealer.
  RingTensor with_dealer = is_first ? draw_prev({parts}) : draw_next({parts});

  RingTensor c = ring_add(values, r_mine);
  send(other, c, width);
  const std::string from = "rss3 party " + std::to_string(id) + " msb_bits (dcf): the dealer (party " +
                           std::to_string(dealer) + ")";
  std::uint64_t start = 0, k = 0;
  if (store_on) {
    const auto header = co_await party.endpoint_->recv(dealer, stream_, tag_);
    if (header.size() != 16)
      throw Error(ErrorCode::protocol, from + " sent a store header of " + std::to_string(header.size()) +
                                           " bytes, expected 16");
    std::memcpy(&start, header.data(), 8);
    std::memcpy(&k, header.data() + 8, 8);
    if (k > n)
      throw Error(ErrorCode::protocol, from + " assigned " + std::to_string(k) + " stored correlations to a call of " +
                                           std::to_string(n) + " elements");
  }
  RingTensor delta = k > 0 ? co_await recv(dealer, {k}, width) : RingTensor{};
  ring_add_inplace(c, co_await recv(other, {n}, width));
  RingTensor mine = ring_zeros({parts});  // e_A or e_B: packed bits, or ring words
  if (k > 0) {  // from the store, at c* = c - delta = x + r*
    std::vector<Ring> x(k), mask_bits;
    for (std::size_t e = 0; e < k; ++e) x[e] = (c.data()[e] - delta.data()[e]) & low;
    const std::vector<Ring> below = party.store_->evaluate(slot, is_first ? 1 : 2, start, x, mask_bits);
    for (std::size_t e = 0; e < k; ++e) {
      const Ring c_top = ((c.data()[e] - delta.data()[e]) >> m) & 1;
      if (arith) {
        mine.data()[e] = (Ring{1} - 2 * c_top) * (below[e] + mask_bits[e]) + (is_first ? c_top : 0);
        continue;
      }
      Ring bit = below[e] ^ bit_of(mask_bits.data(), e);
      if (is_first) bit ^= c_top;
      mine.data()[e / 64] |= bit << (e % 64);
    }
    note_store(party.dcf_stats_, *party.store_, id);
  }
  const std::size_t slices = (n - k + slice - 1) / slice;
  const int out_bits = arith ? ring_bits : 1;
  for (std::size_t j = 0; j < slices; ++j) {
    const std::size_t b = k + j * slice, e = std::min(n, b + slice), count = e - b;
    // The keys' message is dropped once read: only the parsed keys stay.
    const DcfCorrections keys =
        dcf_deserialize(co_await party.endpoint_->recv(dealer, stream_, tag_), m, out_bits, count, from);
    std::vector<Ring> top;  // B's bits r_m ^ t_A or offsets r_m - rho
    if (!is_first) {
      const auto message = co_await party.endpoint_->recv(dealer, stream_, tag_);
      top = arith ? get_offsets(message, count, from) : get_bits(message, count, from);
    }
    std::vector<Ring> c_low(count);
    for (std::size_t q = 0; q < count; ++q) c_low[q] = c.data()[b + q] & low;
    const std::vector<Ring> below =
        dcf_evaluate(is_first ? 0 : 1, keys, std::span<const DcfSeed>(root).subspan(b, count), c_low);
    for (std::size_t q = 0; q < count; ++q) {
      const std::size_t at = b + q;
      const Ring c_top = (c.data()[at] >> m) & 1;
      if (arith) {
        // Shares of z = r_m ^ [c' < r'], then of msb = c_m ^ z = c_m + (1 - 2 c_m) z.
        const Ring z = below[q] + (is_first ? t_a.data()[at] : top[q]);
        mine.data()[at] = (Ring{1} - 2 * c_top) * z + (is_first ? c_top : 0);
        continue;
      }
      const Ring bit = below[q] ^ (is_first ? c_top ^ bit_of(t_a.data(), at) : bit_of(top.data(), q));
      mine.data()[at / 64] |= bit << (at % 64);
    }
    if (j + 2 < slices) party.endpoint_->send(dealer, stream_, std::vector<std::byte>(1), tag_);
  }
  // Round 2: b_{L+2} = msb - b_L - b_{L+1} (or msb ^ b_L ^ b_{L+1}) from
  // the pair's parts, each masked by the component it shares with D.
  const std::string peer = "rss3 party " + std::to_string(id) + " msb_bits (dcf): party " + std::to_string(other);
  if (arith) {  // only the low result_bits travel: the result is needed mod 2^result_bits
    ring_sub_inplace(mine, with_dealer);
    send(other, mine, result_bits);
    ring_add_inplace(mine, co_await recv(other, {n}, result_bits));
  } else {
    ring_xor_inplace(mine, with_dealer);
    party.endpoint_->send(other, stream_, put_bits(std::vector<Ring>(mine.begin(), mine.end()), n), tag_);
    const std::vector<Ring> their_bits = get_bits(co_await party.endpoint_->recv(other, stream_, tag_), n, peer);
    for (std::size_t q = 0; q < words; ++q) mine.data()[q] ^= their_bits[q];
  }
  if (is_first) co_return std::pair{std::move(with_dealer), std::move(mine)};
  co_return std::pair{std::move(mine), std::move(with_dealer)};
}

// prepare_comparisons' part for one dealer, in batches of at most 4,096
// (a receiver frees a batch's memory once all of it is used). Draw order
// with A: masks u_A (A skips them), A's roots, t_A (arithmetic: rho, a
// word each); with B: u_B, B's roots. r* = u_A + u_B, which neither A nor
// B knows. `slot`: rss3_dcf_slot.
Task<void> Rss3::deal_ahead(PartyId dealer, int slot, std::size_t count) {
  constexpr std::size_t batch_max = 4096;
  Rss3Party& party = *party_;
  const PartyId id = party.id_, first = (dealer + 1) % 3;
  const int width = rss3_dcf_slot_width(slot);
  const Rss3DcfOutput output = rss3_dcf_slot_output(slot);
  const bool arith = output == Rss3DcfOutput::arith;
  const std::string from = "rss3 party " + std::to_string(id) + " prepare_comparisons: the dealer (party " +
                           std::to_string(dealer) + ")";
  for (std::size_t done = 0; done < count;) {
    const std::size_t b = std::min(batch_max, count - done), parts = arith ? b : words_for(b);
    done += b;
    if (id == dealer) {
      const RingTensor u_a = draw_next({b}), roots_a = draw_next({2 * b}), t_a = draw_next({parts});
      const RingTensor u_b = draw_prev({b}), roots_b = draw_prev({2 * b});
      std::vector<Ring> r(b);
      for (std::size_t e = 0; e < b; ++e) r[e] = u_a.data()[e] + u_b.data()[e];
      Deal deal = make_deal(width, r, tree_roots(roots_a), tree_roots(roots_b), t_a.data(), 0, output);
      party.dcf_stats_.offline_bytes += 2 * deal.keys.size() + deal.top.size();
      party.dcf_stats_.prepared += b;
      party.endpoint_->send(first, stream_, deal.keys, tag_);
      party.endpoint_->send((dealer + 2) % 3, stream_, std::move(deal.keys), tag_);
      party.endpoint_->send((dealer + 2) % 3, stream_, std::move(deal.top), tag_);
      party.store_->push_masks(slot, r);
      continue;
    }
    const bool is_first = id == first;
    (void)(is_first ? draw_prev({b}) : draw_next({b}));  // the dealer's mask part
    Rss3DcfBatch batch;
    batch.count = b;
    batch.roots = tree_roots(is_first ? draw_prev({2 * b}) : draw_next({2 * b}));
    if (is_first) {
      const RingTensor t_a = draw_prev({parts});
      batch.bits.assign(t_a.begin(), t_a.end());
    }
    batch.corrections = co_await party.endpoint_->recv(dealer, stream_, tag_);
    const std::size_t want = dcf_correction_bytes(width - 1, arith ? ring_bits : 1, b);
    if (batch.corrections.size() != want)
      throw Error(ErrorCode::protocol, from + " sent " + std::to_string(batch.corrections.size()) +
                                           " bytes of keys, expected " + std::to_string(want) + " for " +
                                           std::to_string(b) + " correlations at width " + std::to_string(width) +
                                           (arith ? " (arithmetic output)" : "") +
                                           " (did the parties call prepare_comparisons alike, with no comparison in flight?)");
    if (!is_first) {
      const auto top = co_await party.endpoint_->recv(dealer, stream_, tag_);
      batch.bits = arith ? get_offsets(top, b, from) : get_bits(top, b, from);
    }
    party.store_->push_batch(slot, is_first ? 1 : 2, std::move(batch));
  }
}

}  // namespace mpcache
