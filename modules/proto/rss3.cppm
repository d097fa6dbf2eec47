// rss3: 2-out-of-3 replicated secret sharing over Z_2^64 (ABY3 / PUMA),
// semi-honest, honest majority. Party i holds (s_i, s_{i+1}) of x = s0+s1+s2.
//
// Cost per party (n = output elements, 8 bytes each):
//   input          owner sends n to each of the 2 others        1 round
//   reveal         every party sends n to the next one           1 round
//   reveal_to(j)   party j-1 sends n to j                        1 round
//   mul, matmul    every party sends n to the previous one      1 round
//   truncate       party 0 sends n to party 2                    1 round
//   mul_trunc, matmul_trunc (fused)  every party sends n         1 round
//   (probabilistic truncation; exact truncation costs more, see below)
//   bits_and       every party sends n words                     1 round
//   to_bits(w)     (A2B) 1 + (2 + ceil(log2 w)) words, 2+ceil(log2 w) rounds (w >= 2)
//   bit_to_arith   (B2A of bit 0) every party sends n            2 rounds
//                  (n ceil(r / 8) bytes when the result is needed only
//                  mod 2^r)
//                  (party 0 holds t = b0 ^ b1, parties 1 and 2 b2: party 0
//                  sends t - r to 1, r from its key with 2; b = t ^ b2 is
//                  then additive between 1 and 2, who reshare it)
//   msb_bits(w)    sign of a mod 2^w on packed bit planes (rss3_msb.cpp):
//                  2 + ceil(log2(ceil((w-1)/g))) rounds, g = 2..6 positions
//                  per group (fewest rounds, then fewest bytes); bytes from
//                  rss3_msb_cost: w = 64 (g = 4) 6 rounds and 15.6 bytes per
//                  element and party, w = 27 5 rounds and 6.2 bytes
//                  comparisons = dcf (rss3_dcf.cpp): the party outside
//                  a pair deals a DCF key for [c' < r'], the pair opens c =
//                  x + r to each other and reshares the result: 2 rounds,
//                  rss3_dcf_cost (about 16 (w-1) dealt bytes per element to
//                  each of the pair, ceil(w/8) + 1/8 per element each way)
//   bit_dot        (B2A fused with a product summed over the last axis:
//                  (..., k) -> (..., 1)) every party sends 2n + n/k  2 rounds
// Zero-sharings come from pairwise AES-CTR keys: party i shares k_i with
// party i+1, agreed at setup (one round, keys from the OS RNG).
//
// Truncation, on a 2-out-of-2 view (party 0 holds a, parties 1 and 2 hold
// b, x = a + b): floor(a/2^d) + ceil(b/2^d), which is floor(x/2^d) or one
// more unless a + b wraps around 2^64 (as signed integers).
//   exact (Rss3Options::exact_truncation): the wrap is corrected, so the
//     result is floor(x/2^d) or +1 for every |x| < 2^62. For such x the
//     wrap depends only on the top two bits of a and of b (both in the top
//     quarter: +1, both in the bottom quarter: -1); party 0 sends its two
//     quarter bits masked to party 1, parties 1 and 2 each hold an additive
//     part of the wrap and exchange it masked: one more round, in which
//     party 0 takes no part.
//     Only the low d bits of the wrap's parts matter (its weight is
//     2^(64-d)), so they travel as ceil(d/8) bytes (c) instead of 8:
//       mul_trunc, matmul_trunc   2 rounds; party 0 sends 8n + 2cn bytes,
//                                 1 and 2 send 8n + cn (d = 18: 14n, 11n)
//       truncate                  2 rounds; party 0 8n + 2cn, 1 and 2 cn
//     (a truncation alone now takes 1 round, rss3.cpp). With truncation
//     pairs made ahead (Rss3Options::truncation_pairs_budget,
//     rss3_pairs.cpp) a fused product takes 1 round: every party sends
//     the bytes of bits d-2..63 to both others (12n at d = 18), party 0
//     24 bytes more to each.
//   probabilistic (SecureML-style, the default here): one round, but the
//     wrap happens with probability (|x|+1)/2^64 per element, and then the
//     result is off by ~2^(64-d): garbage. A real value of 16 at 2^(2f),
//     f = 18, gives 2^-24 per element. Our 57-token test prompt failed 2
//     prefills in 650; the risk adds up over every truncated element, so
//     it grows with prompt length (a 1,000-token prompt: about 1 in 17),
//     model width and depth. `mpcache generate` runs exact.
export module mpcache.proto:rss3;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import :prg;
import :linear_base;
export import :rss3_store;
export import :rss3_pairs;
export import :rss3_weight;

export namespace mpcache {

struct Rss3Share {
  RingTensor own;   // s_i
  RingTensor next;  // s_{i+1}
};

// Boolean (XOR) replicated sharing of 64-bit words: x = b0 ^ b1 ^ b2, party i
// holds (b_i, b_{i+1}). All 64 bit positions of a word are processed at once.
struct Rss3Bits {
  RingTensor own;
  RingTensor next;
};

// How msb_bits (and so every comparison) runs: `circuit`, carries on packed
// bit planes (5-6 rounds, a few bytes per element); `dcf`, a distributed
// comparison function dealt by the party outside the pair that opens the
// masked input (2 rounds, about 32 (w-1) dealt bytes per element).
enum class Rss3Comparisons : std::uint8_t { circuit, dcf };
// Keys per inline slice of a dcf comparison (Rss3Options::dcf_slice_bytes).
inline constexpr std::uint64_t rss3_default_dcf_slice_bytes = std::uint64_t{16} << 20;

struct Rss3Options {
  int frac_bits = default_frac_bits;
  // Correct the 2-out-of-2 wrap of every truncation (one more round per
  // truncation, see above); all three parties must agree (checked at setup).
  // On by default: probabilistic truncation (false) saves that round but
  // can fail on any product (docs/protocols.md).
  bool exact_truncation = true;
  // All three parties must agree (checked at setup, like truncation).
  Rss3Comparisons comparisons = Rss3Comparisons::circuit;
  // Derive the pairwise keys from this seed instead of the OS RNG. For tests
  // and reproducible benches only: anyone who knows the seed sees everything.
  std::optional<std::uint64_t> insecure_seed;
  // comparisons = dcf: bytes of dealt correlations a party may hold in its
  // offline store (Rss3Party::prepare_comparisons); 0: no store, every
  // comparison is dealt inline. All three parties must agree.
  std::uint64_t offline_budget = 0;
  // comparisons = dcf: an inline deal of more keys than this (bytes a
  // receiver parses) goes in slices, at most two in flight (rss3_dcf.cpp).
  std::uint64_t dcf_slice_bytes = rss3_default_dcf_slice_bytes;
  // exact_truncation: bytes of truncation pairs a party may hold, over all shifts
  // (Rss3Party::prepare_truncations, rss3_pairs.cpp); 0: none, every exact
  // fused product takes two rounds. With pairs, one takes one round (and
  // party 0 adds 24 bytes to each other party per call, the stream's next
  // grant and a check, whether or not the call found pairs). All three
  // must agree.
  std::uint64_t truncation_pairs_budget = 0;
  // Big local work (matmuls, large element-wise operations) is split over
  // this pool, which the caller owns and keeps alive as long as the party;
  // nullptr: everything runs on the loop's thread. Results do not depend on it.
  ComputePool* pool = nullptr;
  // Keep weights (input_weight) at 8 bytes per element instead of 16 (none
  // at their owner): only the component a party received, the others drawn
  // again with AES-128-CTR at every use (Rss3Weight), so a decode step is
  // slower. Messages and results do not change; each party chooses for itself.
  bool compact_weights = false;
};

class Rss3;

// Exact cost of Rss3::msb_bits over n elements at `width` bits (rounds and
// each party's payload, with party 0 leading), and the group size it uses.
struct Rss3MsbCost : OpCost {
  int group = 2;  // low positions per first-round group
};
// group 0: the group size msb_bits picks (fewest rounds, then fewest bytes).
Rss3MsbCost rss3_msb_cost(int width, std::size_t n, int group = 0);

// Exact cost of Rss3::msb_bits with comparisons = dcf over n elements (party
// 0 leading, i.e. dealing, as in rss3_msb_cost): rounds and each party's
// payload, of which `dealt` is the DCF keys and mask bits a party sent as
// the dealer.
struct Rss3DcfCost : OpCost {
  std::array<std::uint64_t, 3> dealt{};
};
// The offline store in a call: off (offline_budget 0), on but dry (every
// element dealt inline, after a 16-byte header), or filled (every element
// from the store: the header and offsets r - r* travel instead of keys).
enum class Rss3DcfStoreUse : std::uint8_t { off, dry, filled };
// What a dcf comparison yields: the sign as a boolean bit (msb_bits) or as
// an arithmetic 0/1 (msb_arith: 64-bit DCF payloads, no B2A afterwards).
enum class Rss3DcfOutput : std::uint8_t { bit, arith };
// The offline store, Rss3DcfStats::demand and prepare_comparisons name a
// kind of correlation by its slot: the width for bit output, the width +
// 64 for arithmetic output (keys with 64-bit payloads).
constexpr int rss3_dcf_slot(int width, Rss3DcfOutput output) {
  return output == Rss3DcfOutput::arith ? width + 64 : width;
}
constexpr int rss3_dcf_slot_width(int slot) { return slot > 64 ? slot - 64 : slot; }
constexpr Rss3DcfOutput rss3_dcf_slot_output(int slot) { return slot > 64 ? Rss3DcfOutput::arith : Rss3DcfOutput::bit; }
// slice_bytes: Rss3Options::dcf_slice_bytes (inline deals go in slices).
// Arithmetic output: each key carries a 64-bit value per level
// (dcf_correction_bytes(w - 1, 64, n)), B gets 8 bytes of offset, and the
// pair reshares ceil(result_bits / 8) bytes an element (8 unless the
// caller needs the result only mod 2^result_bits: Rss3::msb_arith).
Rss3DcfCost rss3_dcf_cost(int width, std::size_t n, std::uint64_t slice_bytes = rss3_default_dcf_slice_bytes,
                          Rss3DcfStoreUse store = Rss3DcfStoreUse::off, Rss3DcfOutput output = Rss3DcfOutput::bit,
                          int result_bits = ring_bits);
// Elements per inline slice at `width` (at least 64).
std::size_t rss3_dcf_slice_elements(int width, std::uint64_t slice_bytes, Rss3DcfOutput output = Rss3DcfOutput::bit);
// Bytes a receiver's offline store accounts per stored correlation of
// `slot` (its root, the corrections, its mask bit or 8-byte part of the
// mask's top bit); the dealer keeps 8.
std::uint64_t rss3_dcf_stored_bytes(int slot);

// rss3's cost model (CostModel in :protocol): the table at the top of this
// file, with probabilistic truncation. Tested against measured runs.
struct Rss3Costs {
  static OpCost mul(std::size_t n) { return everyone(1, n); }
  static OpCost truncate(std::size_t n) { return {1, {8 * n, 0, 0}}; }  // party 0 to 2
  static OpCost bits_and(std::size_t n) { return everyone(1, n); }
  // The carry-save AND, the generate AND, then Kogge-Stone levels of two
  // ANDs in one message (one in the last).
  static OpCost to_bits(int width, std::size_t n) {
    const std::uint64_t levels = log2_ceil(width);
    return everyone(2 + levels, (2 * levels + 1) * n);
  }
  static OpCost bit_to_arith(std::size_t n) { return everyone(2, n); }
  // Needed only mod 2^result_bits: the words' low bytes.
  static OpCost bit_to_arith(std::size_t n, int result_bits) {
    const std::uint64_t bytes = n * bytes_per_word(result_bits);
    return {2, {bytes, bytes, bytes}};
  }
  static OpCost bit_dot(std::size_t n, std::size_t k) { return everyone(2, 2 * n + n / k); }
  // The call's lead is party (fork mod 3): party i pays what party
  // i - fork pays in rss3_msb_cost.
  static OpCost msb_bits(int width, std::size_t n, std::size_t fork) { return rotated(rss3_msb_cost(width, n), fork); }

 protected:
  static OpCost rotated(const OpCost& c, std::size_t fork) {
    OpCost out{c.rounds, {}};
    for (std::size_t id = 0; id < 3; ++id) out.bytes[id] = c.bytes[(id + 3 - fork % 3) % 3];
    return out;
  }

 private:
  static OpCost everyone(std::uint64_t rounds, std::uint64_t words) { return {rounds, {8 * words, 8 * words, 8 * words}}; }
  static std::uint64_t log2_ceil(int n) {
    std::uint64_t l = 0;
    while ((std::int64_t{1} << l) < n) ++l;
    return l;
  }
};

// rss3's costs with comparisons = dcf (Rss3::DcfCosts): msb_bits is
// rss3_dcf_cost, its dealer rotating like the circuit's lead.
// msb_arith (the optional hook of CostModel): the sign as an arithmetic 0/1
// straight from the DCF, in msb_bits' 2 rounds.
struct Rss3DcfCosts : Rss3Costs {
  static OpCost msb_bits(int width, std::size_t n, std::size_t fork) { return rotated(rss3_dcf_cost(width, n), fork); }
  static OpCost msb_arith(int width, std::size_t n, std::size_t fork, int result_bits = ring_bits) {
    return rotated(rss3_dcf_cost(width, n, rss3_default_dcf_slice_bytes, Rss3DcfStoreUse::off, Rss3DcfOutput::arith,
                                 result_bits),
                   fork);
  }
};

// The same with an offline store on (Rss3Options::offline_budget > 0):
// the online cost of a filled store, so that ops plan on the online phase
// (the keys were dealt ahead; a dry store deals them inline after all).
struct Rss3DcfStoreCosts : Rss3Costs {
  static OpCost msb_bits(int width, std::size_t n, std::size_t fork) {
    return rotated(rss3_dcf_cost(width, n, rss3_default_dcf_slice_bytes, Rss3DcfStoreUse::filled), fork);
  }
  static OpCost msb_arith(int width, std::size_t n, std::size_t fork, int result_bits = ring_bits) {
    return rotated(rss3_dcf_cost(width, n, rss3_default_dcf_slice_bytes, Rss3DcfStoreUse::filled,
                                 Rss3DcfOutput::arith, result_bits),
                   fork);
  }
};

// What a party's dcf comparisons did (comparisons = dcf).
struct Rss3DcfStats {
  std::uint64_t offline_bytes = 0;  // sent as a dealer by prepare_comparisons
  double offline_seconds = 0;       // wall time in prepare_comparisons
  std::uint64_t prepared = 0;       // correlations this party dealt ahead
  std::uint64_t from_store = 0;     // elements of its deals served from the store
  std::uint64_t inline_elements = 0;  // elements it dealt inline (online)
  std::uint64_t ran_dry = 0;        // its deals the store (when on) could not fully serve
  std::uint64_t store_bytes = 0, store_peak = 0;  // accounted bytes held, now and at most
  // Elements compared per slot (rss3_dcf_slot), per dealer: counted at every
  // party, so the same everywhere once the same calls have run (a plan for
  // what to prepare).
  std::map<int, std::array<std::uint64_t, 3>> demand;
};

// Long-lived state of one party: its endpoint and its two pairwise keys.
class Rss3Party {
 public:
  // Agrees on keys with the two peers (one round unless insecure_seed).
  static Task<std::unique_ptr<Rss3Party>> setup(Endpoint& endpoint, Rss3Options options = {});

  PartyId id() const noexcept { return id_; }
  Endpoint& endpoint() noexcept { return *endpoint_; }
  int frac_bits() const noexcept { return options_.frac_bits; }
  const Rss3Options& options() const noexcept { return options_; }
  // Payload bytes this party has sent as a dcf comparison's dealer (keys
  // and mask bits; already counted in the endpoint's bytes too).
  std::uint64_t dealt_bytes() const noexcept { return dealt_bytes_; }
  const Rss3DcfStats& dcf_stats() const noexcept { return dcf_stats_; }

  // comparisons = dcf, offline phase: tops up every dealer's store at
  // `width` (a slot, rss3_dcf_slot: + 64 for arithmetic output) to `count` unused correlations, or as many as
  // Rss3Options::offline_budget allows at every party. A collective call on
  // a stream of its own: all three parties call it in the same order, at a
  // point where none of their comparisons is in flight (between steps, or
  // while a service is idle). Returns the count now held per dealer (the
  // least over dealers).
  Task<std::size_t> prepare_comparisons(int width, std::size_t count);
  // Unused correlations of `slot` in the store, the least over dealers (0
  // without a store): the count prepare_comparisons returns. The same at
  // every party at a quiet point.
  std::uint64_t comparisons_held(int slot) const;
  // exact_truncation with truncation_pairs_budget > 0, offline phase: makes
  // pairs for a shift of `bits` (rss3_pairs.cpp) until `count` are unused,
  // or as many as the budget (over all shifts) holds; ends every stream's
  // grant at that shift. Collective like
  // prepare_comparisons, at a point where no product is in flight. Returns
  // the pairs now unused at that shift.
  Task<std::size_t> prepare_truncations(int bits, std::size_t count);
  // The same for several shifts at once (shift -> count), their pairs made
  // concurrently: the rounds of one shift, not of all. How many each gets
  // is settled before any is made, in order of shift, so every party agrees.
  Task<void> prepare_truncations(const std::map<int, std::uint64_t>& counts);
  const Rss3TruncationStats& truncation_stats() const noexcept { return truncation_stats_; }

  // A protocol handle on a fresh root stream. Parties must open sessions in
  // the same order so that their stream ids agree.
  Rss3 session();
  // A protocol handle for session number `number` of a service, in scope
  // 1 + number mod max_scope: its streams and all its forks' carry the
  // scope (Endpoint::cancel_scope ends them alone), and its randomness
  // derives from the whole number, so a reused scope never reuses it.
  // Numbers must be unique per Rss3Party (a service's leader assigns them).
  Rss3 scoped_session(std::uint64_t number);

  Rss3Party(Endpoint& endpoint, Rss3Options options, const PrgKey& next, const PrgKey& prev);

 private:
  friend class Rss3;
  Endpoint* endpoint_;
  PartyId id_;
  Rss3Options options_;
  Prg prg_next_;  // k_i, shared with party i+1
  Prg prg_prev_;  // k_{i-1}, shared with party i-1
  std::uint64_t sessions_ = 0;
  std::uint64_t dealt_bytes_ = 0;
  std::uint64_t offline_calls_ = 0;
  Rss3DcfStats dcf_stats_;
  std::unique_ptr<Rss3DcfStore> store_;
  std::map<int, Rss3TruncationStore> pairs_;  // by shift
  // prepare_truncations' halves: how many pairs to make at `bits` for
  // `count` unused (within the budget, `planned` bytes already promised to
  // other shifts), and making them.
  std::size_t truncation_pairs_to_make(int bits, std::size_t count, std::uint64_t planned) const;
  Task<void> make_truncation_pairs(int bits, std::size_t make);
  std::map<int, std::uint64_t> keyless_demand_;  // per shift, since the last refill: calls with no plan key
  // dcf_stats_.demand at the last Rss3::refill_comparisons.
  std::map<int, std::array<std::uint64_t, 3>> demand_at_refill_;
  Rss3TruncationPlan plan_;
  Rss3TruncationStats truncation_stats_;
};

// The local operations (add, add_public, apply, bits_xor, ...) come from
// LinearBase: component by component; a public constant enters s_0, held
// as `own` by party 0 and as `next` by party 2.
class Rss3 : public LinearBase<Rss3, ShareParts<Rss3Share, &Rss3Share::own, &Rss3Share::next>,
                               ShareParts<Rss3Bits, &Rss3Bits::own, &Rss3Bits::next>> {
 public:
  using Share = Rss3Share;
  using Bits = Rss3Bits;
  using Costs = Rss3Costs;
  using DcfCosts = Rss3DcfCosts;  // the cost model under comparisons = dcf
  using DcfStoreCosts = Rss3DcfStoreCosts;  // ... with an offline store

  // An unscoped stream keeps no scope bits (without_scope): a hash's top
  // bits would otherwise name some session's scope, and that session's
  // cancellation (a client gone) would end this stream too.
  Rss3(Rss3Party& party, StreamId stream, bool scoped = false)
      : party_(&party), stream_(scoped ? stream : without_scope(stream)), scoped_(scoped) {}
  Rss3(Rss3&&) noexcept = default;
  Rss3& operator=(Rss3&&) noexcept = default;
  // Copies would reuse the stream's randomness: forbidden, use fork().
  Rss3(const Rss3&) = delete;
  Rss3& operator=(const Rss3&) = delete;

  PartyId party_id() const noexcept { return party_->id_; }
  bool dcf_comparisons() const noexcept {
    return party_->options_.comparisons == Rss3Comparisons::dcf && !on_circuit_;
  }
  bool dcf_store() const noexcept { return dcf_comparisons() && party_->options_.offline_budget > 0; }
  // Collective: every party at the same point of this stream. With
  // comparisons = dcf, `on` makes this stream, and the forks it makes from
  // now on (not those made before), compare on the circuit and plan on the
  // circuit's costs, until called again with false; the party's store and
  // keys stay. Per stream, so that a server's sessions choose apart: one
  // prefills on the circuit while others decode with DCF keys.
  // generate_party and the service do so for a prefill under DCF
  // comparisons, with or without a store: a prefill's comparisons grow with
  // the prompt and no store holds them, so their keys would be dealt inline
  // (our model, 64 tokens: 2.2 GB and 43 s, against 95 MB and 0.3 s on the
  // circuit). Switching back forgets the party's truncations counted on the
  // circuit for the next refill (refill_truncation_pairs' calls with no plan
  // key): their shifts are the circuit's, and pairs for them, at least 2^16
  // per shift, would hold the budget the DCF path's shifts need; with
  // sessions at once that forgets theirs too (the service's sessions use
  // no pairs: without_truncation_pairs; its batched steps' calls have plan keys).
  void compare_on_circuit(bool on) noexcept {
    if (!on && on_circuit_) party_->keyless_demand_.clear();
    on_circuit_ = on;
  }
  // With truncation pairs (Rss3Options::truncation_pairs_budget > 0), `off`
  // makes this stream, and the forks it makes from now on, truncate in two
  // rounds without touching the store: no pairs, grants or demand. Set alike
  // at every party. The service does so for each session's own streams
  // (prefill, first token), which run while the batched steps' refills
  // (Rss3::refill_truncation_pairs, which needs a quiet point) take place.
  void without_truncation_pairs(bool off) noexcept { pairs_off_ = off; }
  bool exact_truncation() const noexcept { return party_->options_.exact_truncation; }
  bool holds_input(PartyId owner) const noexcept { return owner == party_->id_; }
  int frac_bits() const noexcept { return party_->options_.frac_bits; }
  StreamId stream() const noexcept { return stream_; }
  Rss3 fork();  // inherits the cost tag, and a share of the truncation pairs this stream holds (rss3_pairs.cppm)
  // Collective, at a quiet point (after Rss3Party::prepare_truncations):
  // this stream takes every pair no stream holds, for it and its forks.
  void take_truncation_pairs();
  // Collective, at a quiet point between steps (the TruncationPairs hook):
  // per shift, makes pairs until these are unused: a reservation for each
  // call this stream and its forks made since the last refill
  // (Rss3TruncationPlan: the next step repeats them), and `multiple` times
  // what calls with no plan key truncated (a prefill before any refill, or
  // other streams) over `steps` (at least 2^16), for the tree of shares
  // this stream then takes (a first step's calls have no reservation yet).
  // After a prefill of T tokens pass steps = T: its demand per token
  // stands in for the first decode step's. multiple 0 makes none (and
  // reserves from what is held). `ahead` > 1: a shift whose unused pairs
  // would not cover what it wants is topped up to `ahead` times that, so
  // that pairs are made in lumps (fewer offline rounds), not before every
  // step. Nothing without truncation pairs: returns whether this party has them.
  Task<bool> refill_truncation_pairs(std::size_t multiple, std::size_t steps = 1, std::size_t ahead = 1);
  // Collective, at a quiet point between steps, with comparisons = dcf and
  // an offline store (Rss3Options::offline_budget > 0): per slot, tops the
  // store up to the most any dealer compared since the last refill, per step
  // over `steps` (after a prefill of T tokens, T), + 5% + 64, within the
  // budget (Rss3Party::prepare_comparisons). Nothing without a store:
  // returns whether this party has one.
  Task<bool> refill_comparisons(std::size_t steps = 1);
  // What this stream's messages count as (CostCounters::by_tag).
  CostTag cost_tag() const noexcept { return tag_; }
  void set_cost_tag(CostTag tag) noexcept { tag_ = tag; }

  using LinearBase::shape;

  Task<Share> input(PartyId owner, std::optional<RingTensor> value, Shape shape);
  // Weights (Rss3Weight; src/proto/rss3_weights.cpp), at 8 bytes per
  // element with Rss3Options::compact_weights, else the full share.
  // input_weight sends and draws exactly what input does. A product with a
  // weight (m,k) x (k,n) draws the weight's second component a block of rows
  // at a time and adds up the blocks' local products before the one
  // reshare: the same messages, bytes, rounds and result as with the full
  // share, and only one block of the weight is ever held twice.
  using Weight = Rss3Weight;
  Task<Weight> input_weight(PartyId owner, std::optional<RingTensor> value, Shape shape);
  // The same, the owner's values given a piece at a time (empty elsewhere).
  Task<Weight> input_weight(PartyId owner, Rss3WeightPieces pieces, Shape shape);
  // A (k, n) matrix weight read as (n, k), sharing w's storage; borrowed:
  // w still counts its bytes (a tied LM head), else the result does (w is dropped).
  static Weight transposed(const Weight& w, bool borrowed);
  Share expand(const Weight& w) const;  // both components, for small weights
  Share expand_rows(const Weight& w, std::size_t begin, std::size_t end) const;  // rows [begin, end) of dim 0
  static Shape shape(const Weight& w) { return w.shape; }
  Task<Share> matmul(const Share& a, const Weight& b);
  Task<Share> matmul_trunc(const Share& a, const Weight& b);
  // Pacing of a long run of input_weight (the owner streaming its
  // checkpoint): each other party confirms what it has received (an empty
  // message to the owner, on a stream of its own), and the owner waits for
  // an earlier confirmation before it reads on, so that what it sends does
  // not pile up in its outboxes.
  void confirm_weights(PartyId owner);
  Task<void> weights_confirmed(PartyId owner);
  Task<RingTensor> reveal(const Share& a);
  Task<std::optional<RingTensor>> reveal_to(PartyId receiver, const Share& a);

  Task<Share> mul(const Share& a, const Share& b);
  Task<Share> matmul(const Share& a, const Share& b);
  Task<Share> truncate(const Share& a, int bits);
  // Fixed-point products: one round, truncated by frac_bits().
  // bits < 0: frac_bits(). Other values truncate by `bits` in the same round.
  Task<Share> mul_trunc(const Share& a, const Share& b, int bits = -1);
  Task<Share> matmul_trunc(const Share& a, const Share& b);
  // sum over i < terms of a_i b_i, term(i) giving (a_i, b_i) when asked:
  // the local products are summed, then reshared once (1 round, the bytes
  // of one product), and each term is dropped before the next is asked for
  // (ops::matmul_sum; kv's page store streams a backing file through it).
  Task<Share> matmul_sum(std::size_t terms, std::function<std::pair<Share, Share>(std::size_t)> term);

  // Boolean layer.
  // A2B: XOR-sharing of a mod 2^width (bits at and above `width` are zero).
  // Carry-save of the three components, then a Kogge-Stone adder.
  Task<Bits> to_bits(const Share& a, int width = ring_bits);
  Task<Bits> bits_and(const Bits& x, const Bits& y);
  // B2A of bit 0 of every word (other bits are ignored): arithmetic 0 or 1.
  // result_bits < 64: the caller needs it only mod 2^result_bits (it sums
  // such bits and reads the sum's low bits), so every message carries
  // ceil(result_bits / 8) bytes a word; the higher bits are then not 0.
  Task<Share> bit_to_arith(const Bits& x, int result_bits = ring_bits);
  // Bit 0: 1 where a < 0 as a w-bit signed value, i.e. the sign of a mod
  // 2^w (exact when |a| < 2^(w-1)). Each party leads a third of the
  // elements: it holds A = its two components, the others B = the third.
  // The carry of A + B below bit w-1 is built on bit planes packed 64
  // elements to a word: the lead sends every product of its A bits within
  // a group of g positions, masked (1 round); the others then hold each
  // group's generate and propagate bits as an XOR of two parts and
  // reshare them (1 round); a tree of ANDs halves the groups per round.
  // group 0: chosen by rss3_msb_cost. With comparisons = dcf the lead
  // deals instead (rss3_dcf.cpp) and `group` is unused.
  Task<Bits> msb_bits(const Share& a, int width = ring_bits, int group = 0);
  // The same sign as an arithmetic 0/1 (the ArithmeticSign hook). With
  // comparisons = dcf the DCF's payload is a ring element, so the pair ends
  // with additive shares of the sign and reshares them: msb_bits' 2 rounds,
  // no B2A (rss3_dcf.cpp). Circuit: msb_bits then bit_to_arith.
  // result_bits < 64: the caller needs the sign only mod 2^result_bits
  // (it sums signs and compares the sum on that many bits), so the pair
  // reshares ceil(result_bits / 8) bytes an element instead of 8; the
  // result's higher bits are then not the sign's. The circuit passes it to
  // its B2A.
  Task<Share> msb_arith(const Share& a, int width = ring_bits, int result_bits = ring_bits);
  // sum_last (bit 0 of b) * x, truncated by `bits` (0: exact); see rss3.cpp.
  Task<Share> bit_dot(const Bits& b, const Share& x, int bits = 0);
  // sum over the last axis of a b, truncated by `bits` (0: exact), (..., k)
  // -> (...): the local products summed before one reshare, so a product's
  // round (rss3_dot.cpp). With an arithmetic 0/1 from msb_arith it selects
  // in the round bit_dot's B2A half would take.
  Task<Share> dot_trunc(const Share& a, const Share& b, int bits = 0);
  Task<RingTensor> reveal_bits(const Bits& x);

 private:
  friend LinearBase;
  static constexpr const char* protocol_name = "rss3";
  // Component i is s_{id+i}; a public constant is added to s_0.
  bool holds_public_part(std::size_t i) const noexcept { return (party_->id_ + i) % 3 == 0; }
  ComputePool* compute_pool() const noexcept { return party_->options_.pool; }
  PartyId next_id() const noexcept { return (party_->id_ + 1) % 3; }
  PartyId prev_id() const noexcept { return (party_->id_ + 2) % 3; }
  RingTensor draw_next(const Shape& s);  // from k_i
  RingTensor draw_prev(const Shape& s);  // from k_{i-1}
  RingTensor zero_share(const Shape& s);
  // low_bits < 64: only the low bits of each word matter to the receiver,
  // so only ceil(low_bits / 8) bytes of each are sent (zero-extended).
  void send(PartyId to, const RingTensor& t, int low_bits = ring_bits);
  Task<RingTensor> recv(PartyId from, Shape shape, int low_bits = ring_bits);
  Task<Share> reshare(RingTensor z);
  Bits component_bits(const Share& a, PartyId j) const;  // XOR-sharing of s_j
  Share component_arith(const Share& a, PartyId j) const;  // arithmetic sharing of s_j
  // This party's additive (3-out-of-3) term of a b, before the zero share and resharing.
  static RingTensor local_product(const Share& a, const Share& b);
  static void check_bits(int bits);  // a truncation's shift: [0, 63]
  // With truncation pairs (rss3_pairs.cpp) when they apply, else the next.
  Task<Share> reshare_truncated(RingTensor z, int bits);
  Task<Share> reshare_truncated_in_two_rounds(RingTensor z, int bits);  // exact; one round probabilistic
  bool truncation_pairs_on(int bits) const noexcept;
  Task<Share> truncate_with_pairs(RingTensor z, int bits);
  // Party 0's grant and fingerprint of the pairs used sent; the others' checked and taken.
  Task<void> exchange_grant(int bits, Rss3TruncationGrants::Range grant, Ring used);
  Rss3TruncationGrants& grants(int bits);  // this stream's at a shift, in the store's epoch
  // floor(x / 2^bits) (or one more) of x = a + b, from party 0's a or
  // parties 1 and 2's b (`part`): the 2-out-of-2 view every truncation ends in.
  Task<Share> truncate_view(RingTensor part, int bits);
  // The same, exact, in one round, when parties 1 and 2 hold b before the
  // call (a truncation alone, not after a product): rss3.cpp.
  Task<Share> truncate_view_exact_at_once(RingTensor part, int bits);
  StreamId confirmations_stream() const;  // confirm_weights's
  StreamId pieces_stream() const;         // input_weight's own pacing of a big weight's pieces
  // The local product a w of matmul with a weight, blockwise (rss3_weights.cpp).
  RingTensor local_matmul_weight(const Share& a, const Weight& w) const;
  // msb_bits of flat values with party `lead` holding A; planes in, bit planes out.
  Task<Bits> msb_planes(PartyId lead, RingTensor a_or_b, std::size_t n, int width, int group);
  // The same from a DCF dealt by `dealer`: the next party holds A, the one
  // after it B (x = A + B); the dealer passes nothing. Both components of
  // the result: bit planes (output bit) or ring words (output arith).
  Task<std::pair<RingTensor, RingTensor>> dcf_compare(PartyId dealer, RingTensor a_or_b, std::size_t n, int width,
                                                      Rss3DcfOutput output, int result_bits = ring_bits);
  // msb_bits and msb_arith: a third of the elements to each dealer or lead;
  // both components, one bit or ring word per element.
  Task<std::pair<RingTensor, RingTensor>> compare_thirds(const Share& a, int width, int group, Rss3DcfOutput output,
                                                         int result_bits = ring_bits);
  // prepare_comparisons' part for one dealer: `count` correlations at `width`.
  Task<void> deal_ahead(PartyId dealer, int width, std::size_t count);
  friend class Rss3Party;

  Rss3Party* party_;
  StreamId stream_;
  std::uint64_t block_next_ = 0;
  std::uint64_t block_prev_ = 0;
  std::uint64_t forks_ = 0;
  bool scoped_ = false;  // forks keep the stream's scope bits
  CostTag tag_ = CostTag::other;
  std::map<int, std::shared_ptr<Rss3TruncationGrants>> pairs_;  // this stream's truncation pairs by shift (rss3_pairs.cpp)
  // Rss3TruncationPlan's key of this stream (0: none, not under a refill),
  // and the forks and truncations it made since it got it.
  std::uint64_t plan_key_ = 0, plan_forks_ = 0, plan_calls_ = 0;
  // Compare with the circuit whatever the options say: making truncation
  // pairs offline, where dcf keys dealt inline would cost far more bytes.
  bool circuit_only_ = false;
  bool on_circuit_ = false;  // compare_on_circuit: this stream and its later forks
  bool pairs_off_ = false;   // without_truncation_pairs: this stream and its later forks
};

}  // namespace mpcache
