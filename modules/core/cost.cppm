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

}  // namespace mpcache
