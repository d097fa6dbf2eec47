// The offline phase of rss3's dcf comparisons: the store of correlations
// dealt ahead (modules/proto/rss3_store.cppm) and prepare_comparisons, which
// fills it within Rss3Options::offline_budget (the dealing itself is
// Rss3::deal_ahead in rss3_dcf.cpp, beside the inline deal it mirrors).
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

void Rss3DcfStore::push_masks(int width, std::span<const Ring> masks) {
  Masks& m = masks_[width];
  m.r.insert(m.r.end(), masks.begin(), masks.end());
  counts(width)[self_] += masks.size();
}

std::pair<std::uint64_t, std::vector<Ring>> Rss3DcfStore::take_masks(int width, std::size_t n) {
  Masks& m = masks_[width];
  const std::size_t k = std::min(n, m.r.size());
  std::pair<std::uint64_t, std::vector<Ring>> out{m.front, std::vector<Ring>(m.r.begin(), m.r.begin() + static_cast<std::ptrdiff_t>(k))};
  m.r.erase(m.r.begin(), m.r.begin() + static_cast<std::ptrdiff_t>(k));
  m.front += k;
  counts(width)[self_] -= k;
  return out;
}

void Rss3DcfStore::push_batch(int width, int role, Rss3DcfBatch batch) {
  std::uint64_t& filed = received_[{width, role}];
  batch.first = filed;
  filed += batch.count;
  counts(width)[(self_ + 3 - static_cast<PartyId>(role)) % 3] += batch.count;
  batches_[{width, role}].emplace(batch.first, std::move(batch));
}

std::vector<Ring> Rss3DcfStore::evaluate(int width, int role, std::uint64_t start, std::span<const Ring> x,
                                         std::vector<Ring>& mask_bits) {
  auto& filed = batches_[{width, role}];
  const std::size_t n = x.size();
  std::vector<Ring> out(n);
  const bool arith = rss3_dcf_slot_output(width) == Rss3DcfOutput::arith;
  const int out_bits = arith ? ring_bits : 1;
  mask_bits.assign(arith ? n : (n + 63) / 64, 0);
  for (std::size_t done = 0; done < n;) {
    const std::uint64_t at = start + done;
    auto it = filed.upper_bound(at);
    if (it == filed.begin() || std::prev(it)->second.first + std::prev(it)->second.count <= at)
      throw Error(ErrorCode::protocol, "rss3 party " + std::to_string(self_) + " dcf store: correlation " +
                                           std::to_string(at) + " at width " + std::to_string(width) +
                                           " is not held (used twice, or never dealt)");
    Rss3DcfBatch& batch = std::prev(it)->second;
    const std::size_t begin = static_cast<std::size_t>(at - batch.first), take = std::min(n - done, batch.count - begin);
    const DcfCorrections keys = dcf_deserialize_range(batch.corrections, rss3_dcf_slot_width(width) - 1, out_bits,
                                                      batch.count, begin, begin + take);
    const std::vector<Ring> y = dcf_evaluate(role == 1 ? 0 : 1, keys,
                                             std::span<const DcfSeed>(batch.roots).subspan(begin, take),
                                             x.subspan(done, take));
    for (std::size_t q = 0; q < take; ++q) {
      out[done + q] = y[q];
      if (arith) {
        mask_bits[done + q] = batch.bits[begin + q];
        continue;
      }
      mask_bits[(done + q) / 64] |= ((batch.bits[(begin + q) / 64] >> ((begin + q) % 64)) & 1) << ((done + q) % 64);
    }
    batch.used += take;
    if (batch.used == batch.count) filed.erase(std::prev(it));
    done += take;
  }
  counts(width)[(self_ + 3 - static_cast<PartyId>(role)) % 3] -= n;
  return out;
}

std::uint64_t Rss3DcfStore::remaining(int width, PartyId dealer) const {
  const auto it = remaining_.find(width);
  return it == remaining_.end() ? 0 : it->second[dealer];
}

std::uint64_t Rss3DcfStore::held_by(PartyId j) const {
  std::uint64_t bytes = 0;
  for (const auto& [width, unused] : remaining_)  // j is A for dealer j - 1, B for j + 1
    bytes += (unused[(j + 2) % 3] + unused[(j + 1) % 3]) * rss3_dcf_stored_bytes(width) + unused[j] * sizeof(Ring);
  return bytes;
}

Task<std::size_t> Rss3Party::prepare_comparisons(int width, std::size_t count) {
  const std::string what = "rss3 party " + std::to_string(id_) + " prepare_comparisons";
  if (options_.comparisons != Rss3Comparisons::dcf)
    throw Error(ErrorCode::invalid_argument, what + ": comparisons are not dcf (Rss3Options::comparisons)");
  if (options_.offline_budget == 0)
    throw Error(ErrorCode::invalid_argument, what + ": Rss3Options::offline_budget is 0, so there is no store to fill");
  if (width < 2 || width > 2 * ring_bits || width == ring_bits + 1)
    throw Error(ErrorCode::invalid_argument, what + ": width " + std::to_string(width) +
                                                 " is outside [2, 64] (bit output) or [66, 128] (arithmetic, width + 64)");
  const auto started = std::chrono::steady_clock::now();
  // Top-ups for a target t, the same at every party at a quiet point; the
  // largest t <= count within every party's budget.
  auto need = [&](std::uint64_t t, PartyId d) {
    const std::uint64_t have = store_->remaining(width, d);
    return t > have ? t - have : 0;
  };
  auto fits = [&](std::uint64_t t) {
    for (PartyId j = 0; j < 3; ++j) {
      const std::uint64_t after = store_->held_by(j) +
                                  (need(t, (j + 2) % 3) + need(t, (j + 1) % 3)) * rss3_dcf_stored_bytes(width) +
                                  need(t, j) * sizeof(Ring);
      if (after > options_.offline_budget) return false;
    }
    return true;
  };
  std::uint64_t lo = 0, hi = count;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  const std::array<std::size_t, 3> deals{need(lo, 0), need(lo, 1), need(lo, 2)};
  Rss3 q(*this, derive_stream(0x0FF11E5E55ull, ++offline_calls_));
  Rss3 f0 = q.fork(), f1 = q.fork(), f2 = q.fork();  // one per dealer, in this order everywhere
  co_await when_all(f0.deal_ahead(0, width, deals[0]), f1.deal_ahead(1, width, deals[1]),
                    f2.deal_ahead(2, width, deals[2]));
  dcf_stats_.offline_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  dcf_stats_.store_bytes = store_->held_by(id_);
  dcf_stats_.store_peak = std::max(dcf_stats_.store_peak, dcf_stats_.store_bytes);
  co_return static_cast<std::size_t>(comparisons_held(width));
}

std::uint64_t Rss3Party::comparisons_held(int slot) const {
  if (!store_) return 0;
  std::uint64_t least = store_->remaining(slot, 0);
  for (PartyId d = 1; d < 3; ++d) least = std::min(least, store_->remaining(slot, d));
  return least;
}

// The demand since the last refill is the same at every party (each counts
// every dealer's elements), so all three top up alike.
Task<bool> Rss3::refill_comparisons(std::size_t steps) {
  Rss3Party& party = *party_;
  if (!dcf_store()) co_return false;
  if (steps == 0) throw Error(ErrorCode::invalid_argument, "refill_comparisons over 0 steps");
  std::map<int, std::uint64_t> want;
  for (const auto& [slot, per_dealer] : party.dcf_stats_.demand) {
    const auto before = party.demand_at_refill_.find(slot);
    for (std::size_t d = 0; d < 3; ++d) {
      const std::uint64_t used = per_dealer[d] - (before == party.demand_at_refill_.end() ? 0 : before->second[d]);
      want[slot] = std::max(want[slot], (used + steps - 1) / steps);
    }
  }
  party.demand_at_refill_ = party.dcf_stats_.demand;
  for (const auto& [slot, n] : want)
    if (n > 0) (void)co_await party.prepare_comparisons(slot, n + n / 20 + 64);
  co_return true;
}

}  // namespace mpcache
