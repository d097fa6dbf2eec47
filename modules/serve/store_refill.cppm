// The service's offline phase for DCF comparisons (`mpcache serve
// --comparisons dcf+offline`). Under Rss3Options::comparisons = dcf with an
// offline store (offline_budget > 0) the batched decode steps draw their
// comparison keys from the servers' stores (Rss3Party::prepare_comparisons)
// instead of having them dealt inline, so a step moves offsets, not keys.
//
// When. prepare_comparisons is collective and needs a quiet point: no DCF
// comparison in flight at any server, so that all three see the same unused
// counts. In the service that is the start of a batched step: steps run one
// at a time in the leader's order, and nothing else compares with DCF keys
// (prefills and their first token compare on the circuit, per stream). So
// every server calls before_step at the same place, with the same rows.
//
// How much. A step's demand per slot grows with its rows (sessions) and,
// slowly, with their caches, and differs from step to step (a policy may
// reselect on some steps only). The most demand per row of the last 16
// steps, times this step's rows, + 5% + 64, is what the step should find;
// when a slot holds less, it is topped up to `steps_ahead` such steps
// (within the budget), so the dealing comes in lumps, not a round trip
// before every step. The first step has no estimate and deals inline, as
// does a step that needs more than was seen (Rss3DcfStats::ran_dry).
//
// Truncation pairs (`--truncation exact+offline`, Rss3Options::
// truncation_pairs_budget > 0) are made at the same point, on the batched
// steps' own stream (Rss3::refill_truncation_pairs): for each exact fused
// truncation the last step made, pairs for the same call of the next, a
// quarter more; a shift that holds too few is topped up to `steps_ahead`
// steps' worth, so pairs too are made in lumps. The sessions' own streams use none (their prefills run
// meanwhile), so this is a quiet point for pairs as well. A step whose
// calls outgrow their reservation (a session joined) truncates those in two
// rounds; the next refill reserves for the new sizes.
export module mpcache.serve:store_refill;
import mpcache.std;
import mpcache.net;
import mpcache.async;
import mpcache.proto;

export namespace mpcache::serve {

// This server's offline work so far: refills, and the rounds (the mesh's
// clock during them), bytes (this server's, dealing keys and making pairs)
// and wall time they took.
struct OfflineCosts {
  std::uint64_t refills = 0;
  std::uint64_t rounds = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
};

class StoreRefill {
 public:
  explicit StoreRefill(std::size_t steps_ahead) : steps_ahead_(std::max<std::size_t>(steps_ahead, 1)) {}

  // Collective: every server, before each batched step of `rows` rows on
  // `steps` (the batched steps' stream), in the same order. Nothing unless
  // the party has a store of DCF keys or truncation pairs.
  Task<void> before_step(Rss3Party& party, Rss3& steps, std::size_t rows);
  const OfflineCosts& costs() const noexcept { return costs_; }

 private:
  Task<void> refill_comparisons(Rss3Party& party, std::size_t rows);
  Task<void> refill_truncation_pairs(Rss3Party& party, Rss3& steps);
  std::size_t steps_ahead_;
  OfflineCosts costs_;
  static constexpr std::size_t recent_steps = 16;  // the steps whose demand per row counts
  std::map<int, std::array<std::uint64_t, 3>> demand_at_step_;  // Rss3DcfStats::demand when the last step began
  std::size_t last_rows_ = 0;                                    // that step's rows (0: none yet)
  std::map<int, std::deque<std::uint64_t>> per_row_;             // per slot: the recent steps' demand per row
};

}  // namespace mpcache::serve
