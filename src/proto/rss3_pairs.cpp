// rss3 truncation pairs (modules/proto/rss3_pairs.cppm): an exact fused
// product in one online round, from pairs made ahead (ABY3's truncation
// pairs, opened to all three parties, with the wrap taken from msb(r)).
//
// Online, for the additive terms z_i of x (a product's local terms with the
// zero share; |x| < 2^62 - 3 2^d) and a pair (r, high, top) held by all:
//   Round 1: party i sends u_i = z_i + r_i (+ 2^62 at party 0) to both
//   others, only its bits at and above k = 64 - 8 ceil((66 - d)/8) (the
//   bytes that hold bits d-2..63; 6 bytes at d = 18). Every party adds the three high parts:
//   c = sum_i (u_i >> k) << k = x' + r mod 2^64, x' = x + 2^62 - L, where
//   L < 3 2^k is what the dropped low bits carried (x' >= 0 then).
//   Since 0 <= x' < 2^63, x' + r wraps past 2^64 only if r >= 2^63, and
//   then exactly when c < 2^63: the wrap is w = top (1 - msb(c)), with c
//   public, so it is local. With that,
//     floor(x'/2^d) = floor(c/2^d) - floor(r/2^d) - [c mod 2^d < r mod 2^d] + w 2^(64-d)
//   and the result is y = floor(c/2^d) - high + top (1 - msb c) 2^(64-d)
//   - 2^(62-d) + 1: x/2^d within 2 (k <= d - 2, so L/2^d < 3/4; the
//   borrow and high's +1 are each 0 or 1; tested).
// Party 0 also sends parties 1 and 2 the stream's next grant (16 bytes),
// in this round or in the two-round path's (see rss3_pairs.cppm).
//
// Who sees what: c = x' + r, with r uniform to every party (each lacks
// one of its three components), so c says nothing of x. Party j receives
// u_{j+1}, masked by the zero share's key k_{j+1} that j lacks, and
// u_{j+2}, fixed by c and the first. The pair's high and top are
// replicated sharings from a secure computation and are never opened.
// Semi-honest, honest majority, as the rest of rss3.
//
// Offline (prepare_truncations): r is a replicated random (each party
// draws its two components from its pairwise keys, no message). top =
// msb(r) and b = msb(2r) (bit 62 of r) from one msb_arith over both, then
// t = r - top 2^63 - b 2^62 lies in [0, 2^62), where the one-round exact
// truncation applies: high = truncate(t, d) + top 2^(63-d) + b 2^(62-d).
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

// ---- the store ----------------------------------------------------------------

void Rss3TruncationStore::refill(std::span<const Ring> r_own, std::span<const Ring> r_next,
                                 std::span<const Ring> high_own, std::span<const Ring> high_next,
                                 std::span<const Ring> top_own, std::span<const Ring> top_next) {
  const auto drop = static_cast<std::ptrdiff_t>(granted_end_ - base_);
  for (auto* v : {&r_own_, &r_next_, &high_own_, &high_next_, &top_own_, &top_next_}) v->erase(v->begin(), v->begin() + drop);
  base_ = granted_end_;
  r_own_.insert(r_own_.end(), r_own.begin(), r_own.end());
  r_next_.insert(r_next_.end(), r_next.begin(), r_next.end());
  high_own_.insert(high_own_.end(), high_own.begin(), high_own.end());
  high_next_.insert(high_next_.end(), high_next.begin(), high_next.end());
  top_own_.insert(top_own_.end(), top_own.begin(), top_own.end());
  top_next_.insert(top_next_.end(), top_next.begin(), top_next.end());
  ++epoch_;
}

Rss3TruncationGrant Rss3TruncationStore::grant(std::uint64_t count) {
  const std::uint64_t n = std::min(count, ungranted());
  const Rss3TruncationGrant g{epoch_, granted_end_, granted_end_ + n};
  granted_end_ += n;
  return g;
}

void Rss3TruncationStore::note_grant(const Rss3TruncationGrant& g) {
  if (g.next < base_ || g.end < g.next || g.end > base_ + size())
    throw Error(ErrorCode::protocol, "rss3 truncation pairs: party 0 granted pairs [" + std::to_string(g.next) + ", " +
                                         std::to_string(g.end) + "), this party holds [" + std::to_string(base_) +
                                         ", " + std::to_string(base_ + size()) + ")");
  granted_end_ = std::max(granted_end_, g.end);
}

Rss3TruncationStore::Slice Rss3TruncationStore::slice(std::uint64_t first, std::size_t n) const {
  if (first < base_ || first + n > base_ + size())
    throw Error(ErrorCode::protocol, "rss3 truncation pairs [" + std::to_string(first) + ", " +
                                         std::to_string(first + n) + ") are not held (held: [" +
                                         std::to_string(base_) + ", " + std::to_string(base_ + size()) + "))");
  const std::size_t at = static_cast<std::size_t>(first - base_);
  return {r_own_.data() + at, r_next_.data() + at, high_own_.data() + at,
          high_next_.data() + at, top_own_.data() + at, top_next_.data() + at};
}

// ---- offline ------------------------------------------------------------------

Task<std::size_t> Rss3Party::prepare_truncations(std::size_t count) {
  const std::string what = "rss3 party " + std::to_string(id_) + " prepare_truncations";
  if (!options_.exact_truncation)
    throw Error(ErrorCode::invalid_argument, what + ": truncation is not exact (Rss3Options::exact_truncation)");
  if (options_.truncation_pairs_budget == 0)
    throw Error(ErrorCode::invalid_argument,
                what + ": Rss3Options::truncation_pairs_budget is 0, so there is no store to fill");
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t sent_before = endpoint_->costs().payload_bytes_sent();
  // The store keeps its ungranted pairs; the budget bounds what it holds after.
  const std::uint64_t room = options_.truncation_pairs_budget / Rss3TruncationStore::bytes_per_pair;
  const std::uint64_t have = pairs_.ungranted(), target = std::min<std::uint64_t>(count, room);
  const std::size_t make = static_cast<std::size_t>(target > have ? target - have : 0);
  const int d = options_.frac_bits;

  Rss3 q(*this, derive_stream(0x7A1C0FF5ull, ++offline_calls_));
  const Shape s{make};
  Rss3Share r{q.draw_prev(s), q.draw_next(s)};  // s_i from k_{i-1}, s_{i+1} from k_i
  std::vector<Ring> high_own(make), high_next(make), top_own(make), top_next(make);
  if (make > 0) {
    // msb(r) and msb(2r) in one call.
    Rss3Share both{RingTensor::from_shape({2 * make}), RingTensor::from_shape({2 * make})};
    for (std::size_t i = 0; i < make; ++i) {
      both.own.data()[i] = r.own.data()[i], both.own.data()[make + i] = r.own.data()[i] << 1;
      both.next.data()[i] = r.next.data()[i], both.next.data()[make + i] = r.next.data()[i] << 1;
    }
    const Rss3Share signs = co_await q.msb_arith(both);
    Rss3Share t{RingTensor::from_shape(s), RingTensor::from_shape(s)};
    for (std::size_t i = 0; i < make; ++i) {
      t.own.data()[i] = r.own.data()[i] - (signs.own.data()[i] << 63) - (signs.own.data()[make + i] << 62);
      t.next.data()[i] = r.next.data()[i] - (signs.next.data()[i] << 63) - (signs.next.data()[make + i] << 62);
    }
    const Rss3Share low = co_await q.truncate(t, d);
    for (std::size_t i = 0; i < make; ++i) {
      high_own[i] = low.own.data()[i] + (signs.own.data()[i] << (63 - d)) + (signs.own.data()[make + i] << (62 - d));
      high_next[i] = low.next.data()[i] + (signs.next.data()[i] << (63 - d)) + (signs.next.data()[make + i] << (62 - d));
      top_own[i] = signs.own.data()[i];
      top_next[i] = signs.next.data()[i];
    }
  }
  pairs_.refill(std::span<const Ring>(r.own.data(), make), std::span<const Ring>(r.next.data(), make), high_own,
                high_next, top_own, top_next);
  truncation_stats_.prepared += make;
  truncation_stats_.offline_bytes += endpoint_->costs().payload_bytes_sent() - sent_before;
  truncation_stats_.offline_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  truncation_stats_.store_bytes = pairs_.bytes();
  truncation_stats_.store_peak = std::max(truncation_stats_.store_peak, truncation_stats_.store_bytes);
  co_return static_cast<std::size_t>(pairs_.ungranted());
}

// ---- online -------------------------------------------------------------------

bool Rss3::truncation_pairs_on(int bits) const noexcept {
  const Rss3Options& o = party_->options_;
  return o.exact_truncation && o.truncation_pairs_budget > 0 && bits == o.frac_bits;
}

// Party 0 tells parties 1 and 2 the stream's next grant (count 0: none).
Task<void> Rss3::exchange_grant(std::optional<Rss3TruncationGrant> grant) {
  Rss3TruncationStore& store = party_->pairs_;
  const Shape header{2};
  if (party_->id_ == 0) {
    RingTensor h = RingTensor::from_shape(header);
    h.data()[0] = grant ? grant->next : 0;
    h.data()[1] = grant ? grant->left() : 0;
    send(1, h);
    send(2, h);
    if (grant) pairs_grant_ = *grant;
    co_return;
  }
  const RingTensor h = co_await recv(0, header);
  if (h.data()[1] == 0) co_return;
  const Rss3TruncationGrant g{store.epoch(), h.data()[0], h.data()[0] + h.data()[1]};
  store.note_grant(g);
  pairs_grant_ = g;
}

Task<Rss3Share> Rss3::truncate_with_pairs(RingTensor z, int bits) {
  Rss3Party& party = *party_;
  Rss3TruncationStore& store = party.pairs_;
  Rss3TruncationStats& stats = party.truncation_stats_;
  const PartyId id = party.id_;
  const Shape s = shape_of(z);
  const std::size_t n = z.size();
  if (pairs_grant_.epoch != store.epoch()) pairs_grant_ = {store.epoch(), 0, 0};  // a refill ended it
  const bool use = pairs_grant_.left() >= n;
  // Party 0 grants the stream its next range when what is left would not
  // serve a call of this size again (streams repeat their shapes: exp's
  // squarings, a norm's Newton steps, one projection per layer).
  std::optional<Rss3TruncationGrant> grant;
  if (id == 0 && pairs_grant_.left() - (use ? n : 0) < n && n > 0) {
    if (store.ungranted() >= n) {
      grant = store.grant(2 * n);
      stats.granted += grant->left();
    } else {
      stats.ran_dry += 2 * n;
    }
  }
  if (!use) {
    stats.two_round += n;
    Rss3Share y = co_await reshare_truncated_in_two_rounds(std::move(z), bits);
    co_await exchange_grant(grant);
    co_return y;
  }
  const Rss3TruncationStore::Slice pair = store.slice(pairs_grant_.next, n);
  pairs_grant_.next += n;
  stats.from_pairs += n;

  // Bits d-2..63 of each term, in whole bytes: the low `kept_low` bits stay
  // home, and what they carried is less than 3/4 of 2^d.
  const int opened_bits = std::min(ring_bits, 8 * ((ring_bits - bits + 2 + 7) / 8)), kept_low = ring_bits - opened_bits;
  const Ring offset = id == 0 ? Ring{1} << 62 : 0;
  RingTensor mine = RingTensor::from_shape(s);
  for (std::size_t i = 0; i < n; ++i) mine.data()[i] = (z.data()[i] + pair.r_own[i] + offset) >> kept_low;
  send(next_id(), mine, opened_bits);
  send(prev_id(), mine, opened_bits);
  if (id == 0) co_await exchange_grant(grant);
  const RingTensor from_next = co_await recv(next_id(), s, opened_bits);
  const RingTensor from_prev = co_await recv(prev_id(), s, opened_bits);
  if (id != 0) co_await exchange_grant(std::nullopt);

  const int up = ring_bits - bits;
  const Ring shift_back = (Ring{1} << (62 - bits)) - 1;  // the offset, less the +1 that centres the error
  Rss3Share y{RingTensor::from_shape(s), RingTensor::from_shape(s)};
  // The public part goes into component 0: party 0's own, party 2's next.
  Ring* public_into = id == 0 ? y.own.data() : id == 2 ? y.next.data() : nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    const Ring c = (mine.data()[i] + from_next.data()[i] + from_prev.data()[i]) << kept_low;
    const Ring no_wrap_top = 1 - (c >> 63);  // the wrap is top (1 - msb c)
    y.own.data()[i] = ((no_wrap_top * pair.top_own[i]) << up) - pair.high_own[i];
    y.next.data()[i] = ((no_wrap_top * pair.top_next[i]) << up) - pair.high_next[i];
    if (public_into) public_into[i] += (c >> bits) - shift_back;
  }
  co_return y;
}

}  // namespace mpcache
