// StoreRefill (modules/serve/store_refill.cppm): tops the DCF store up
// before a batched step, from the most demand per row of recent steps, and
// makes the truncation pairs the step's calls will want.
module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.net;
import mpcache.async;
import mpcache.proto;

namespace mpcache::serve {

Task<void> StoreRefill::before_step(Rss3Party& party, Rss3& steps, std::size_t rows) {
  co_await refill_comparisons(party, rows);
  co_await refill_truncation_pairs(party, steps);
}

Task<void> StoreRefill::refill_truncation_pairs(Rss3Party& party, Rss3& steps) {
  if (!party.options().exact_truncation || party.options().truncation_pairs_budget == 0) co_return;
  const Endpoint& mesh = party.endpoint();
  const std::uint64_t rounds0 = mesh.rounds(), bytes0 = party.truncation_stats().offline_bytes,
                      made0 = party.truncation_stats().prepared;
  const auto t0 = std::chrono::steady_clock::now();
  // 16: generate's multiple for calls without a plan; here every call of the
  // steps' stream has one, so it only matters if that changes. Pairs for
  // steps_ahead steps at a time, as the DCF keys.
  (void)co_await steps.refill_truncation_pairs(16, 1, steps_ahead_);
  if (party.truncation_stats().prepared > made0) ++costs_.refills;  // else reservations only
  costs_.rounds += mesh.rounds() - rounds0;
  costs_.bytes += party.truncation_stats().offline_bytes - bytes0;
  costs_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Task<void> StoreRefill::refill_comparisons(Rss3Party& party, std::size_t rows) {
  if (party.options().comparisons != Rss3Comparisons::dcf || party.options().offline_budget == 0) co_return;
  const auto& demand = party.dcf_stats().demand;  // the same at every server here: a quiet point
  // Per slot, the last step's demand per row (the most of any dealer) joins
  // the recent ones; what this step should find is the most of those per
  // row, times this step's rows, + 5% + 64. The most, not the last: a
  // policy's steps differ (MPCache reselects on some steps, not others).
  if (last_rows_ > 0)
    for (const auto& [slot, per_dealer] : demand) {
      const auto before = demand_at_step_.find(slot);
      std::uint64_t most = 0;
      for (std::size_t d = 0; d < 3; ++d)
        most = std::max(most, per_dealer[d] - (before == demand_at_step_.end() ? 0 : before->second[d]));
      auto& recent = per_row_[slot];
      recent.push_back((most + last_rows_ - 1) / last_rows_);
      if (recent.size() > recent_steps) recent.pop_front();
    }
  std::map<int, std::uint64_t> wanted;
  for (const auto& [slot, recent] : per_row_) {
    const std::uint64_t step = *std::max_element(recent.begin(), recent.end()) * rows;
    if (step > 0) wanted[slot] = step + step / 20 + 64;
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Bytes from the dealing itself (only dealers send); rounds from the
  // mesh's clock, which other sessions' prefills advance too meanwhile.
  const Endpoint& mesh = party.endpoint();
  const std::uint64_t rounds0 = mesh.rounds(), bytes0 = party.dcf_stats().offline_bytes;
  bool refilled = false;
  for (const auto& [slot, want] : wanted) {
    if (party.comparisons_held(slot) >= want) continue;
    (void)co_await party.prepare_comparisons(slot, want * steps_ahead_);
    refilled = true;
  }
  if (refilled) {
    ++costs_.refills;
    costs_.rounds += mesh.rounds() - rounds0;
    costs_.bytes += party.dcf_stats().offline_bytes - bytes0;
    costs_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  demand_at_step_ = demand;
  last_rows_ = rows;
}

}  // namespace mpcache::serve
