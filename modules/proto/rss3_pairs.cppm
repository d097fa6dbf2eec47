// rss3's truncation pairs: an offline store that makes an exact fused
// product (mul_trunc, matmul_trunc, dot_trunc) take one online round
// instead of two (src/proto/rss3_pairs.cpp has the protocol and why it is
// private).
//
// A pair is three replicated sharings that no single party knows the
// values of: a uniform r mod 2^64, high = floor(r / 2^d) (or one more) and
// top = msb(r) as 0/1, for one shift d (a store per shift: products shift
// by the fraction bits, the norms' and reciprocals' steps by others).
// Every party holds the same pairs, numbered 0, 1, 2, ... in the order
// they were made (Rss3Party::prepare_truncations, a collective call at a
// quiet point).
//
// Which pairs a call uses must be the same at all three parties before the
// call's only round, yet concurrent streams reach the parties in different
// orders. So pairs are handed down the tree of streams, which every party
// builds alike (Rss3TruncationGrants): a root stream takes the whole store
// (Rss3::take_truncation_pairs, at a quiet point), a fork takes a share of
// what its parent holds (fork_share), and a stream's unused pairs go back
// to its parent when it ends. A stream that holds too few for a call
// takes the two-round path, and party 0 grants it more from what no
// stream holds, in that call's messages (24 bytes to each, with a
// fingerprint of the pairs it used), so parties 1 and 2 learn it before
// the stream's next call. Filling the store at a quiet point ends every
// grant (a new epoch) and keeps only the pairs no call used.
//
// Shares down the tree suit a first step, whose calls nobody has seen yet,
// but a fork deep in a burst gets little. A decode step repeats the last
// one's calls, so a refill (Rss3::refill_truncation_pairs) also reserves
// pairs for each call the last step made (Rss3TruncationPlan), by a key
// that every party derives alike and that the next step's same call
// derives again; such a call needs no share of the tree.
export module mpcache.proto:rss3_pairs;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

// The pairs a stream holds: ranges [first, end) of pair numbers, sorted and
// disjoint, valid in one epoch of the store. Shared by a stream and its
// moves; a fork's holds its parent's, to give back what is left when it ends.
class Rss3TruncationGrants {
 public:
  using Range = std::pair<std::uint64_t, std::uint64_t>;
  Rss3TruncationGrants() = default;
  Rss3TruncationGrants(std::uint64_t epoch, std::shared_ptr<Rss3TruncationGrants> parent);
  ~Rss3TruncationGrants();  // gives what is left to the parent (same epoch)
  Rss3TruncationGrants(const Rss3TruncationGrants&) = delete;
  Rss3TruncationGrants& operator=(const Rss3TruncationGrants&) = delete;

  std::uint64_t epoch() const noexcept { return epoch_; }
  std::uint64_t held() const noexcept { return held_; }
  // A refill ended this epoch: hold nothing, in the new one.
  void reset(std::uint64_t epoch);
  void add(Range r);
  // The first n pairs held, removed (n <= held()).
  std::vector<Range> take(std::uint64_t n);
  // The last n pairs held, removed: a fork's share.
  std::vector<Range> take_back(std::uint64_t n);
  // What a new fork takes: 1/2 of what is held for the first fork of a
  // burst (forks made while none has ended), then 1/3 of what is left, 1/4,
  // ...: the k-th of a burst gets about 1/k^2, not 1/2^k. A fork that ends
  // and this stream's own products end the burst.
  std::uint64_t fork_share() noexcept { return held_ / (2 + burst_++); }
  void end_burst() noexcept { burst_ = 0; }

 private:
  std::uint64_t epoch_ = 0, held_ = 0, burst_ = 0;
  std::vector<Range> ranges_;
  std::shared_ptr<Rss3TruncationGrants> parent_;
};

// The widest shift pairs serve: the result's offset 2^(62-d) needs d <= 62,
// and a wider shift would leave the product no range (|x| < 2^62 - 3 2^d).
inline constexpr int max_truncation_pair_bits = 60;

// What a party's truncation pairs did (Rss3Party::truncation_stats).
struct Rss3TruncationStats {
  std::uint64_t prepared = 0;        // pairs made by prepare_truncations
  std::uint64_t offline_bytes = 0;   // this party's payload bytes sent making them
  double offline_seconds = 0;        // wall time in prepare_truncations
  std::uint64_t from_pairs = 0;      // elements truncated with a pair (one round)
  std::uint64_t two_round = 0;       // elements of exact fused truncations at d that took two rounds
  std::uint64_t planned = 0;         // of from_pairs: with pairs reserved for their call (Rss3TruncationPlan)
  std::uint64_t granted = 0;         // pairs granted to streams (party 0 counts; the others learn them)
  std::uint64_t ran_dry = 0;         // pairs a grant asked for that the store no longer had
  std::uint64_t store_bytes = 0, store_peak = 0;  // bytes of pairs held (all shifts), now and at most
  // Elements of exact fused truncations per shift, with pairs or not: the
  // same at every party, so a plan for what to prepare.
  std::map<int, std::uint64_t> demand;
};

// Pairs reserved per call. Keys: the refilling stream's is fixed by its
// stream id; a fork's mixes its parent's with its number among the
// parent's forks since the refill; a call's mixes its stream's with its
// number among the stream's truncations since then. Forks and calls follow
// the same program at every party and in every step, so a key names the
// same call at all three parties and, after a refill, the same call of the
// next step. A call's reservation holds the elements it had last step and
// a quarter more (attention over a cache grows by a row per step); what a
// step leaves unused the store keeps for the next.
class Rss3TruncationPlan {
 public:
  using Range = Rss3TruncationGrants::Range;
  // A keyed call of `count` elements at shift `bits` in the store's
  // `epoch`: recorded for the next refill. Returns its reserved pairs (the
  // first `count`) if it has at least that many in this epoch.
  std::optional<std::vector<Range>> use(std::uint64_t key, int bits, std::uint64_t epoch, std::uint64_t count);
  // Per shift, the pairs the calls recorded since the last reserve() want.
  std::map<int, std::uint64_t> wanted() const;
  // Ends the old reservations and reserves for every recorded call, in
  // order of key (alike at every party), what grant(bits, count) gives
  // (the store's next ungranted pairs; fewer when it has fewer); then
  // forgets the record. epoch(bits): the store's epoch at that shift.
  void reserve(const std::function<Range(int, std::uint64_t)>& grant, const std::function<std::uint64_t(int)>& epoch);
  static std::uint64_t with_slack(std::uint64_t count) noexcept { return count + count / 4 + 16; }
  static std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept;

 private:
  struct Recorded {
    int bits;
    std::uint64_t count;
  };
  struct Reserved {
    int bits;
    std::uint64_t epoch;
    Range range;
  };
  std::map<std::uint64_t, Recorded> recorded_;  // by key: the largest count seen
  std::unordered_map<std::uint64_t, Reserved> reserved_;
};

// One party's pairs, as replicated components (own: s_i, next: s_{i+1}).
class Rss3TruncationStore {
 public:
  static constexpr std::uint64_t bytes_per_pair = 6 * sizeof(Ring);

  std::uint64_t epoch() const noexcept { return epoch_; }
  // Pairs no stream was given in this epoch (every party agrees at a quiet
  // point: parties 1 and 2 see every grant party 0 makes).
  std::uint64_t ungranted() const noexcept { return base_ + size() - granted_end_; }
  std::uint64_t unused() const noexcept { return size() - used_count_; }
  std::uint64_t bytes() const noexcept { return size() * bytes_per_pair; }

  // A quiet point: keeps the pairs no call used (renumbered from the
  // next number on), appends the new ones (each span: own then next
  // component of one sharing), and starts a new epoch, ending every grant.
  void refill(std::span<const Ring> r_own, std::span<const Ring> r_next, std::span<const Ring> high_own,
              std::span<const Ring> high_next, std::span<const Ring> top_own, std::span<const Ring> top_next);
  // The next `count` ungranted pairs (fewer when fewer are left).
  Rss3TruncationGrants::Range grant(std::uint64_t count);
  // Parties 1 and 2: a grant party 0 announced (it must be held).
  void note_grant(Rss3TruncationGrants::Range r);
  // The components of the pairs in `ranges`, gathered, and marked used
  // (each must be held and unused: a pair is used once).
  struct Gathered {
    std::vector<Ring> r_own, r_next, high_own, high_next, top_own, top_next;
  };
  Gathered use(const std::vector<Rss3TruncationGrants::Range>& ranges);

 private:
  std::size_t size() const noexcept { return r_own_.size(); }
  std::uint64_t epoch_ = 0;
  std::uint64_t base_ = 0;         // number of the first pair held
  std::uint64_t granted_end_ = 0;  // every pair below it has been granted
  std::uint64_t used_count_ = 0;
  std::vector<Ring> r_own_, r_next_, high_own_, high_next_, top_own_, top_next_;
  std::vector<std::uint8_t> used_;
};

}  // namespace mpcache
