// The benches' way of filling rss3's offline store of DCF correlations
// between decode steps: per slot (rss3_dcf_slot), the most any dealer used in
// the previous step, + 5% + 64. Every party sees the same demand, so all
// prepare alike. Include after imports.
//
// Not quite the library's policy (Rss3::refill_comparisons, which generate
// uses through StepDriver): this one tops up every slot seen so far, 64 in
// a slot the previous step did not use (the library skips such a slot), and
// the benches start it at the second decode step (the first runs dry), where
// the library starts from the prefill's demand per prompt token. The benches
// pass it to StepDriver as its comparison refill, so that their committed
// rows keep their numbers.
#pragma once

namespace mpcache::bench {

// Per slot, the most any dealer compared between two snapshots of the demand.
inline std::map<int, std::uint64_t> step_demand(const Rss3DcfStats& before, const Rss3DcfStats& after) {
  std::map<int, std::uint64_t> out;
  for (const auto& [slot, per_dealer] : after.demand) {
    const auto old = before.demand.find(slot);
    for (std::size_t d = 0; d < 3; ++d)
      out[slot] = std::max(out[slot], per_dealer[d] - (old == before.demand.end() ? 0 : old->second[d]));
  }
  return out;
}

// Tops every slot the previous step used up to its demand + 5% + 64.
inline Task<void> fill_for_next_step(Rss3Party& party, const Rss3DcfStats& before, const Rss3DcfStats& after) {
  for (const auto& [slot, n] : step_demand(before, after))
    (void)co_await party.prepare_comparisons(slot, n + n / 20 + 64);
}

}  // namespace mpcache::bench
