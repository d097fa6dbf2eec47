// rss3 truncation pairs (modules/proto/rss3_pairs.cppm): an exact fused
// product in one online round, from pairs made ahead (ABY3's truncation
// pairs, opened to all three parties, with the wrap taken from msb(r)).
//
// Online, for the additive terms z_i of x (a product's local terms with the
// zero share; |x| < 2^62 - 3 2^d) and a pair (r, high, top) held by all:
//   Round 1: party i sends u_i = z_i + r_i (+ 2^62 at party 0) to both
//   others, only its bits at and above k = 64 - 8 ceil((66 - d)/8) (the
//   bytes that hold bits d-2..63; 6 bytes at d = 18). Every party adds
//   the three high parts:
//   c = sum_i (u_i >> k) << k = x' + r mod 2^64, x' = x + 2^62 - L, where
//   L < 3 2^k is what the dropped low bits carried (x' >= 0 then).
//   Since 0 <= x' < 2^63, x' + r wraps past 2^64 only if r >= 2^63, and
//   then exactly when c < 2^63: the wrap is w = top (1 - msb(c)), with c
//   public, so it is local. With that,
//     floor(x'/2^d) = floor(c/2^d) - floor(r/2^d) - [c mod 2^d < r mod 2^d] + w 2^(64-d)
//   and the result is y = floor(c/2^d) - high + top (1 - msb c) 2^(64-d)
//   - 2^(62-d) + 1: x/2^d within 2 (k <= d - 2, so L/2^d < 3/4; the
//   borrow and high's +1 are each 0 or 1; tested).
// Party 0 also sends parties 1 and 2 the stream's next grant and a
// fingerprint of the pairs it used (24 bytes), in this round or in the
// two-round path's (see rss3_pairs.cppm).
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
// The signs come from the circuit even under dcf comparisons (fewer bytes;
// rounds matter less offline).
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

// ---- a stream's grants --------------------------------------------------------

Rss3TruncationGrants::Rss3TruncationGrants(std::uint64_t epoch, std::shared_ptr<Rss3TruncationGrants> parent)
    : epoch_(epoch), parent_(std::move(parent)) {}

Rss3TruncationGrants::~Rss3TruncationGrants() {
  if (!parent_ || parent_->epoch_ != epoch_) return;
  for (const Range& r : ranges_) parent_->add(r);
  parent_->end_burst();
}

void Rss3TruncationGrants::reset(std::uint64_t epoch) {
  epoch_ = epoch;
  held_ = 0;
  ranges_.clear();
}

void Rss3TruncationGrants::add(Range r) {
  if (r.first == r.second) return;
  auto at = std::lower_bound(ranges_.begin(), ranges_.end(), r);
  at = ranges_.insert(at, r);
  held_ += r.second - r.first;
  // Merge with the neighbours it touches.
  if (at + 1 != ranges_.end() && at->second == (at + 1)->first) {
    at->second = (at + 1)->second;
    ranges_.erase(at + 1);
  }
  if (at != ranges_.begin() && (at - 1)->second == at->first) {
    (at - 1)->second = at->second;
    ranges_.erase(at);
  }
}

std::vector<Rss3TruncationGrants::Range> Rss3TruncationGrants::take(std::uint64_t n) {
  std::vector<Range> out;
  while (n > 0 && !ranges_.empty()) {
    Range& r = ranges_.front();
    const std::uint64_t k = std::min(n, r.second - r.first);
    out.push_back({r.first, r.first + k});
    r.first += k;
    n -= k;
    held_ -= k;
    if (r.first == r.second) ranges_.erase(ranges_.begin());
  }
  return out;
}

std::vector<Rss3TruncationGrants::Range> Rss3TruncationGrants::take_back(std::uint64_t n) {
  std::vector<Range> out;
  while (n > 0 && !ranges_.empty()) {
    Range& r = ranges_.back();
    const std::uint64_t k = std::min(n, r.second - r.first);
    out.push_back({r.second - k, r.second});
    r.second -= k;
    n -= k;
    held_ -= k;
    if (r.first == r.second) ranges_.pop_back();
  }
  return out;
}

// ---- reservations per call -------------------------------------------------------

std::uint64_t Rss3TruncationPlan::mix(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) | 1;  // never 0: 0 means "no key"
}

namespace {
// Calls a plan records between refills, at most: a program that refills
// once and then decodes for long would otherwise grow the record by every
// call of every step (a decode step makes a few thousand).
constexpr std::size_t max_recorded_calls = std::size_t{1} << 20;
}  // namespace

std::optional<std::vector<Rss3TruncationPlan::Range>> Rss3TruncationPlan::use(std::uint64_t key, int bits,
                                                                             std::uint64_t epoch,
                                                                             std::uint64_t count) {
  if (const auto seen = recorded_.find(key); seen != recorded_.end()) {
    if (seen->second.bits == bits) seen->second.count = std::max(seen->second.count, count);
  } else if (recorded_.size() < max_recorded_calls) {
    recorded_.emplace(key, Recorded{bits, count});
  }
  const auto it = reserved_.find(key);
  if (it == reserved_.end()) return std::nullopt;
  const Reserved r = it->second;
  reserved_.erase(it);  // a key names one call
  if (r.bits != bits || r.epoch != epoch || r.range.second - r.range.first < count) return std::nullopt;
  return std::vector<Range>{{r.range.first, r.range.first + count}};
}

std::map<int, std::uint64_t> Rss3TruncationPlan::wanted() const {
  std::map<int, std::uint64_t> out;
  for (const auto& [key, call] : recorded_) out[call.bits] += with_slack(call.count);
  return out;
}

void Rss3TruncationPlan::reserve(const std::function<Range(int, std::uint64_t)>& grant,
                                 const std::function<std::uint64_t(int)>& epoch) {
  reserved_.clear();
  for (const auto& [key, call] : recorded_) {
    const Range r = grant(call.bits, with_slack(call.count));
    if (r.second > r.first) reserved_[key] = {call.bits, epoch(call.bits), r};
  }
  recorded_.clear();
}

// ---- the store ----------------------------------------------------------------

void Rss3TruncationStore::refill(std::span<const Ring> r_own, std::span<const Ring> r_next,
                                 std::span<const Ring> high_own, std::span<const Ring> high_next,
                                 std::span<const Ring> top_own, std::span<const Ring> top_next) {
  const std::size_t old_size = size();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < old_size; ++i) {
    if (used_[i]) continue;
    r_own_[kept] = r_own_[i], r_next_[kept] = r_next_[i];
    high_own_[kept] = high_own_[i], high_next_[kept] = high_next_[i];
    top_own_[kept] = top_own_[i], top_next_[kept] = top_next_[i];
    ++kept;
  }
  for (auto* v : {&r_own_, &r_next_, &high_own_, &high_next_, &top_own_, &top_next_}) v->resize(kept);
  base_ += old_size;  // the kept pairs get new numbers: no number is ever reused
  granted_end_ = base_;
  r_own_.insert(r_own_.end(), r_own.begin(), r_own.end());
  r_next_.insert(r_next_.end(), r_next.begin(), r_next.end());
  high_own_.insert(high_own_.end(), high_own.begin(), high_own.end());
  high_next_.insert(high_next_.end(), high_next.begin(), high_next.end());
  top_own_.insert(top_own_.end(), top_own.begin(), top_own.end());
  top_next_.insert(top_next_.end(), top_next.begin(), top_next.end());
  used_.assign(size(), 0);
  used_count_ = 0;
  ++epoch_;
}

Rss3TruncationGrants::Range Rss3TruncationStore::grant(std::uint64_t count) {
  const std::uint64_t n = std::min(count, ungranted());
  const Rss3TruncationGrants::Range r{granted_end_, granted_end_ + n};
  granted_end_ += n;
  return r;
}

void Rss3TruncationStore::note_grant(Rss3TruncationGrants::Range r) {
  if (r.first < base_ || r.second < r.first || r.second > base_ + size())
    throw Error(ErrorCode::protocol, "rss3 truncation pairs: party 0 granted pairs [" + std::to_string(r.first) +
                                         ", " + std::to_string(r.second) + "), this party holds [" +
                                         std::to_string(base_) + ", " + std::to_string(base_ + size()) + ")");
  granted_end_ = std::max(granted_end_, r.second);
}

Rss3TruncationStore::Gathered Rss3TruncationStore::use(const std::vector<Rss3TruncationGrants::Range>& ranges) {
  Gathered g;
  std::size_t total = 0;
  for (const auto& [first, end] : ranges) total += static_cast<std::size_t>(end - first);
  for (auto* v : {&g.r_own, &g.r_next, &g.high_own, &g.high_next, &g.top_own, &g.top_next}) v->reserve(total);
  for (const auto& [first, end] : ranges) {
    if (first < base_ || end > base_ + size())
      throw Error(ErrorCode::protocol, "rss3 truncation pairs [" + std::to_string(first) + ", " + std::to_string(end) +
                                           ") are not held (held: [" + std::to_string(base_) + ", " +
                                           std::to_string(base_ + size()) + "))");
    for (std::uint64_t k = first; k < end; ++k) {
      const auto i = static_cast<std::size_t>(k - base_);
      if (used_[i]) throw Error(ErrorCode::protocol, "rss3 truncation pair " + std::to_string(k) + " used twice");
      used_[i] = 1;
      g.r_own.push_back(r_own_[i]), g.r_next.push_back(r_next_[i]);
      g.high_own.push_back(high_own_[i]), g.high_next.push_back(high_next_[i]);
      g.top_own.push_back(top_own_[i]), g.top_next.push_back(top_next_[i]);
    }
    used_count_ += end - first;
  }
  return g;
}

// ---- offline ------------------------------------------------------------------

std::size_t Rss3Party::truncation_pairs_to_make(int bits, std::size_t count, std::uint64_t planned) const {
  const std::string what = "rss3 party " + std::to_string(id_) + " prepare_truncations";
  if (!options_.exact_truncation)
    throw Error(ErrorCode::invalid_argument, what + ": truncation is not exact (Rss3Options::exact_truncation)");
  if (options_.truncation_pairs_budget == 0)
    throw Error(ErrorCode::invalid_argument,
                what + ": Rss3Options::truncation_pairs_budget is 0, so there is no store to fill");
  if (bits < 1 || bits > max_truncation_pair_bits)
    throw Error(ErrorCode::invalid_argument, what + ": a shift of " + std::to_string(bits) + " bits is outside [1, " +
                                                 std::to_string(max_truncation_pair_bits) + "]");
  // The store keeps its unused pairs; the budget bounds what all shifts'
  // hold after (`planned`: what this refill makes at other shifts).
  std::uint64_t others = planned, have = 0;
  for (const auto& [shift, held] : pairs_) {
    if (shift != bits) others += held.bytes();
    else have = held.unused();
  }
  const std::uint64_t budget = options_.truncation_pairs_budget;
  const std::uint64_t room = budget > others ? (budget - others) / Rss3TruncationStore::bytes_per_pair : 0;
  const std::uint64_t target = std::min<std::uint64_t>(count, std::max(room, have));
  return static_cast<std::size_t>(target > have ? target - have : 0);
}

Task<std::size_t> Rss3Party::prepare_truncations(int bits, std::size_t count) {
  co_await prepare_truncations(std::map<int, std::uint64_t>{{bits, count}});
  co_return static_cast<std::size_t>(pairs_[bits].unused());
}

Task<void> Rss3Party::prepare_truncations(const std::map<int, std::uint64_t>& counts) {
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t sent_before = endpoint_->costs().payload_bytes_sent();
  // Every count first, in order of shift: the makers below finish in any
  // order, and a store's size must not change a later shift's share.
  std::vector<Task<void>> makers;
  std::uint64_t planned = 0;
  for (const auto& [bits, count] : counts) {
    const std::size_t make = truncation_pairs_to_make(bits, static_cast<std::size_t>(count), planned);
    planned += make * Rss3TruncationStore::bytes_per_pair;
    makers.push_back(make_truncation_pairs(bits, make));
  }
  if (!makers.empty()) co_await when_all(std::move(makers));
  truncation_stats_.offline_bytes += endpoint_->costs().payload_bytes_sent() - sent_before;
  truncation_stats_.offline_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  truncation_stats_.store_bytes = 0;
  for (const auto& [shift, held] : pairs_) truncation_stats_.store_bytes += held.bytes();
  truncation_stats_.store_peak = std::max(truncation_stats_.store_peak, truncation_stats_.store_bytes);
}

// Makes `make` pairs at a shift of `bits` and refills its store (a new
// epoch, even when `make` is 0: what the last one granted and left unused
// is free again).
Task<void> Rss3Party::make_truncation_pairs(int bits, std::size_t make) {
  Rss3TruncationStore& store = pairs_[bits];
  const int d = bits;

  Rss3 q(*this, derive_stream(0x7A1C0FF5ull, ++offline_calls_));
  q.circuit_only_ = true;  // offline: bytes matter more than rounds, and dcf keys would be dealt inline
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
  store.refill(std::span<const Ring>(r.own.data(), make), std::span<const Ring>(r.next.data(), make), high_own,
                high_next, top_own, top_next);
  truncation_stats_.prepared += make;
}

// ---- online -------------------------------------------------------------------

bool Rss3::truncation_pairs_on(int bits) const noexcept {
  const Rss3Options& o = party_->options_;
  return o.exact_truncation && o.truncation_pairs_budget > 0 && !pairs_off_ && bits >= 1 &&
         bits <= max_truncation_pair_bits;
}

// This stream's grants at a shift, empty if a refill ended their epoch.
Rss3TruncationGrants& Rss3::grants(int bits) {
  const std::uint64_t epoch = party_->pairs_[bits].epoch();
  auto& mine = pairs_[bits];
  if (!mine) mine = make_shared<Rss3TruncationGrants>(epoch, nullptr);
  if (mine->epoch() != epoch) mine->reset(epoch);
  return *mine;
}

void Rss3::take_truncation_pairs() {
  for (auto& [bits, store] : party_->pairs_) grants(bits).add(store.grant(store.ungranted()));
}

Task<bool> Rss3::refill_truncation_pairs(std::size_t multiple, std::size_t steps, std::size_t ahead) {
  Rss3Party& party = *party_;
  if (!party.options_.exact_truncation || party.options_.truncation_pairs_budget == 0) co_return false;
  if (steps == 0) throw Error(ErrorCode::invalid_argument, "refill_truncation_pairs over 0 steps");
  if (multiple > 0) {
    std::map<int, std::uint64_t> want = party.plan_.wanted();
    for (const auto& [bits, since] : party.keyless_demand_) {
      // At least a floor per shift: forks take shares, so a shift with few
      // elements still needs enough pairs to reach the deep forks that use it.
      const std::uint64_t per_step = (since + steps - 1) / steps;
      if (since > 0) want[bits] += std::max<std::uint64_t>(multiple * per_step, 1 << 16);
    }
    // Every shift, even one that holds enough: a refill starts the store's
    // new epoch, which frees what the last one granted and left unused.
    for (auto& [bits, count] : want)
      if (party.pairs_[bits].unused() < count) count *= std::max<std::size_t>(ahead, 1);
    co_await party.prepare_truncations(want);
  }
  party.keyless_demand_.clear();
  // This stream's key is fixed by its id, so the next step's calls derive
  // the keys this one's did.
  plan_key_ = Rss3TruncationPlan::mix(0x7A1C0FF5ull, stream_);
  plan_forks_ = plan_calls_ = 0;
  party.plan_.reserve([&party](int bits, std::uint64_t count) { return party.pairs_[bits].grant(count); },
                      [&party](int bits) { return party.pairs_[bits].epoch(); });
  take_truncation_pairs();
  co_return true;
}

namespace {
// What party 0's header says about the pairs a call used, so that parties
// that got out of step fail loudly instead of computing garbage.
Ring fingerprint(const std::vector<Rss3TruncationGrants::Range>& used) {
  Ring f = 0x9E3779B97F4A7C15ull;
  for (const auto& [first, end] : used) f = (f ^ first) * 0x100000001B3ull + end;
  return f;
}
}  // namespace

// Party 0 tells parties 1 and 2 the stream's next grant (count 0: none) and
// the fingerprint of the pairs this call used (0 in the two-round path).
Task<void> Rss3::exchange_grant(int bits, Rss3TruncationGrants::Range grant, Ring used) {
  Rss3TruncationStore& store = party_->pairs_[bits];
  const Shape header{3};
  if (party_->id_ == 0) {
    RingTensor h = RingTensor::from_shape(header);
    h.data()[0] = grant.first;
    h.data()[1] = grant.second - grant.first;
    h.data()[2] = used;
    send(1, h);
    send(2, h);
    grants(bits).add(grant);
    co_return;
  }
  const RingTensor h = co_await recv(0, header);
  if (h.data()[2] != used)
    throw Error(ErrorCode::protocol, "rss3 party " + std::to_string(party_->id_) + " (stream " + std::to_string(stream_) +
                                         "): party 0 used other truncation pairs in this call (out of step)");
  const Rss3TruncationGrants::Range g{h.data()[0], h.data()[0] + h.data()[1]};
  if (g.first == g.second) co_return;
  store.note_grant(g);
  grants(bits).add(g);
}

Task<Rss3Share> Rss3::truncate_with_pairs(RingTensor z, int bits) {
  Rss3Party& party = *party_;
  Rss3TruncationStore& store = party.pairs_[bits];
  Rss3TruncationStats& stats = party.truncation_stats_;
  const PartyId id = party.id_;
  const Shape s = shape_of(z);
  const std::size_t n = z.size();
  Rss3TruncationGrants& held = grants(bits);
  held.end_burst();
  stats.demand[bits] += n;
  // Pairs reserved for this call by the last refill, else the stream's share.
  std::optional<std::vector<Rss3TruncationGrants::Range>> planned;
  if (plan_key_ != 0)
    planned = party.plan_.use(Rss3TruncationPlan::mix(plan_key_, ++plan_calls_), bits, store.epoch(), n);
  else
    party.keyless_demand_[bits] += n;
  const bool use = planned || held.held() >= n;
  // Party 0 grants the stream more when what it holds would not serve a
  // call of this size again (streams repeat their shapes: exp's squarings,
  // a norm's Newton steps).
  Rss3TruncationGrants::Range grant{0, 0};
  if (!planned && id == 0 && held.held() - (use ? n : 0) < n && n > 0) {
    if (store.ungranted() >= n) {
      grant = store.grant(2 * n);
      stats.granted += grant.second - grant.first;
    } else {
      stats.ran_dry += 2 * n;
    }
  }
  if (!use) {
    stats.two_round += n;
    Rss3Share y = co_await reshare_truncated_in_two_rounds(std::move(z), bits);
    co_await exchange_grant(bits, grant, 0);
    co_return y;
  }
  const std::vector<Rss3TruncationGrants::Range> taken = planned ? std::move(*planned) : held.take(n);
  const Rss3TruncationStore::Gathered pair = store.use(taken);
  stats.from_pairs += n;
  if (planned) stats.planned += n;

  // Bits d-2..63 of each term, in whole bytes: the low `kept_low` bits stay
  // home, and what they carried is less than 3/4 of 2^d.
  const int opened_bits = std::min(ring_bits, 8 * ((ring_bits - bits + 2 + 7) / 8)), kept_low = ring_bits - opened_bits;
  const Ring offset = id == 0 ? Ring{1} << 62 : 0;
  RingTensor mine = RingTensor::from_shape(s);
  for (std::size_t i = 0; i < n; ++i) mine.data()[i] = (z.data()[i] + pair.r_own[i] + offset) >> kept_low;
  send(next_id(), mine, opened_bits);
  send(prev_id(), mine, opened_bits);
  if (id == 0) co_await exchange_grant(bits, grant, fingerprint(taken));
  const RingTensor from_next = co_await recv(next_id(), s, opened_bits);
  const RingTensor from_prev = co_await recv(prev_id(), s, opened_bits);
  if (id != 0) co_await exchange_grant(bits, grant, fingerprint(taken));

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
