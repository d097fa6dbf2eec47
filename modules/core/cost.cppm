// Communication cost counters, per party. Payload bytes are what protocols
// send; frame bytes are the per-message headers, counted separately so that
// payload figures match the textbook cost of each protocol exactly.
export module mpcache.core:cost;
import mpcache.std;

export namespace mpcache {

struct PeerTraffic {
  std::uint64_t payload_bytes_sent = 0;
  std::uint64_t frame_bytes_sent = 0;   // headers only
  std::uint64_t messages_sent = 0;      // logical messages (frames)
  std::uint64_t writes = 0;             // coalesced batches handed to the transport
  std::uint64_t payload_bytes_received = 0;
  std::uint64_t messages_received = 0;

  PeerTraffic& operator-=(const PeerTraffic& o);
};

// What a message was sent for, so that a run's cost can be broken down by
// the operators of a transformer (the paper's Figure 1). A protocol object
// carries its current tag (forks inherit it); see cost_scope().
enum class CostTag : std::uint8_t {
  other,       // untagged work (input, reveal, set-up)
  linear,      // projections, embedding, LM head, RoPE
  attention,   // q.K^T and probs.V
  softmax,
  norm,        // RMSNorm / LayerNorm
  activation,  // SiLU / GeLU and the gated product
  summary,     // cluster summaries (selection)
  similarity,  // query-vs-summary scores (selection)
  topk,        // top-k and one-hot of the picks (selection)
  gather,      // gathering the selected keys and values
  eviction,    // static eviction after prefill
  argmax,      // the next token's argmax over the vocabulary
};
inline constexpr std::size_t cost_tag_count = static_cast<std::size_t>(CostTag::argmax) + 1;  // argmax is last
std::string_view cost_tag_name(CostTag tag);

struct TaggedCost {
  std::uint64_t rounds = 0;              // critical-path rounds whose message carried the tag
  std::uint64_t payload_bytes_sent = 0;  // to all peers
  double seconds = 0;                    // wall time up to those rounds (see Endpoint)
};

struct CostCounters {
  std::vector<PeerTraffic> per_peer;  // indexed by party id; own entry stays zero
  std::uint64_t rounds = 0;           // depth of the longest chain of dependent messages
  // Per tag; rounds sum to `rounds`, bytes to payload_bytes_sent().
  std::array<TaggedCost, cost_tag_count> by_tag{};

  std::uint64_t payload_bytes_sent() const;
  std::uint64_t frame_bytes_sent() const;
  std::uint64_t messages_sent() const;
  std::uint64_t writes() const;
  // Difference of two snapshots of the same party (later - earlier).
  friend CostCounters operator-(CostCounters later, const CostCounters& earlier);
};

// The rounds a stretch of work added to the critical path across parties,
// from each party's Lamport clock (CostCounters::rounds) before and after
// it. Clocks differ (a party that only sends does not advance its own), so
// the highest ones are compared. The one way tests, benches and tools count
// a phase's rounds.
struct CriticalPath {
  std::uint64_t before = 0, after = 0;

  void add(std::uint64_t clock_before, std::uint64_t clock_after) noexcept {
    before = std::max(before, clock_before);
    after = std::max(after, clock_after);
  }
  std::uint64_t rounds() const noexcept { return after - before; }
};

// One party's part in a stretch of work (a decode step, a benchmark case, a
// phase), as merge_party_costs takes it.
struct PartyCost {
  // When the party began and ended its part. Parties timed on one clock give
  // its readings; parties timed apart give 0 and their own duration.
  double start_s = 0, end_s = 0;
  std::uint64_t bytes_sent = 0;                     // payload bytes, to all peers
  std::uint64_t clock_before = 0, clock_after = 0;  // its Lamport clock (CostCounters::rounds)
  std::array<TaggedCost, cost_tag_count> by_tag{};  // per operator, if known
  // A dealer (add2's party 2) works ahead of the others: its bytes are
  // offline, and it counts for nothing else.
  bool offline = false;
};

// Bytes, clocks and per-operator costs of a party between two snapshots of
// its counters (times left to the caller).
PartyCost party_cost_between(const CostCounters& before, const CostCounters& after);

// The parties' parts of one stretch of work as one: what reports and tables
// give for it. Every field but offline_bytes is over the online parties.
struct MergedCost {
  double latency_s = 0;              // first party in to last party out
  std::uint64_t rounds = 0;          // on the critical path (CriticalPath)
  std::uint64_t bytes_max_party = 0; // the busiest party's
  std::uint64_t bytes_total = 0;
  std::uint64_t offline_bytes = 0;   // the offline parties', together
  // Per operator: the busiest party's bytes; rounds and seconds as the median
  // party sees them (of two, the higher). A party charges a round to the
  // message that advanced its own clock, so one that only sends in an
  // operator charges the catch-up to a later one; the median is skewed less.
  std::array<TaggedCost, cost_tag_count> by_tag{};
};

// The one way benches, tools and jobs merge the parties' costs.
MergedCost merge_party_costs(std::span<const PartyCost> parties);

}  // namespace mpcache
