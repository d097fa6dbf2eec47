// add2: 2-out-of-2 additive secret sharing over Z_2^64 between parties 0
// and 1, with correlated randomness from a dealer (party 2), semi-honest,
// dealer not colluding with either party (CrypTen's trusted-third-party
// mode, SIGMA/Orca's dealer model). x = x0 + x1; party i holds x_i.
//
// The dealer. It runs the same program as the two parties (every control
// decision in ops, kv and model depends on public shapes only), on zero
// placeholders: each product, truncation or bit conversion there draws the
// masks the parties will draw and sends party 1 the one correction that
// makes them a correlation. It receives nothing after setup, so it never
// waits for the online phase and never sees an online message: its
// messages are the offline phase, and its cost counters are the offline
// cost. Party 0 derives all its correlated randomness from the seed it got
// from the dealer and never hears from the dealer again, but for the DCF
// keys of dcf comparisons (add2_dcf.cpp), whose corrections both parties need.
// Dealer's values: reveal gives zeros, reveal_to nothing; it holds no input.
//
// Keys (setup, one message from the dealer to each party): k0 (party 0 and
// dealer), k1 (party 1 and dealer). Masks come from AES-CTR on (stream,
// block) as in rss3, so forks draw matching randomness everywhere.
//
// Online cost per party (n = elements; a fresh operand of a product is
// masked and opened, an input's mask is fixed when it is shared, see
// Add2Share):
//   input          owner sends n to the other                    1 round
//   reveal         each sends n to the other                     1 round
//   reveal_to(j)   the other sends n to j                        1 round
//   mul, matmul    each sends its fresh operands' masked shares 1 round
//                  (a x b: 2n; one input operand: n; both: 0 rounds)
//   truncate       probabilistic (default): local, 0 rounds
//                  exact: each sends n                           1 round
//   mul_trunc, matmul_trunc    a product, then truncate: 1 or 2 rounds
//   bits_and       each sends 2n words                           1 round
//   to_bits(w)     1 + ceil(log2 w) rounds; 2 + 4 ceil(log2 w) words
//                  (last level 2)
//   msb_bits(w)    sign of a mod 2^w on packed bit planes (add2_msb.cpp):
//                  1 + ceil(log2(w-1)) rounds; 37.4 bytes per element at
//                  w = 64, 14.5 at w = 27 (to_bits: 192)
//                  comparisons = dcf (add2_dcf.cpp): open x + r, then a
//                  dealt DCF key: 1 round, ceil(w/8) bytes per element
//   bit_to_arith   each sends n bytes                            1 round
//   bit_dot        each sends n bytes + n words                  1 round
//                  (+ 1 if exact truncation)
// Offline (dealer to party 1): one word per product output element (a
// matrix triple costs one (m, n) correction, not one per scalar product),
// two per exact truncation, one per B2A, two per bit_dot element. A dcf
// msb_bits costs dcf_correction_bytes(w - 1, 1, n) to each party (16 (w -
// 1) bytes and w bits per element: 1016 bytes at w = 64) and n bits more
// to party 1; it is the one correlation party 0 receives from the dealer.
//
// Truncation. Probabilistic (SecureML): floor(x0/2^d) + ceil(x1/2^d), no
// message, but wrong (by ~2^(64-d)) with probability about |x|/2^64 per
// element, like rss3's default. Exact (Add2Options::exact_truncation):
// the dealer deals r with shares of r >> d and of msb(r); the parties open
// c = x + 2^62 + r and take (c >> d) - (r >> d) + msb(r) (1 - msb(c))
// 2^(64-d) - 2^(62-d): floor(x/2^d) or one more for every |x| < 2^62
// (x + 2^62 < 2^63 wraps past 2^64 exactly when msb(r) and not msb(c)).
export module mpcache.proto:add2;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import :protocol;
import mpcache.net;
import :prg;
import :linear_base;

export namespace mpcache {

// The dealer's party id in an add2 endpoint of 3 parties.
inline constexpr PartyId add2_dealer = 2;

// add2's online cost model (CostModel in :protocol): the table at the top
// of this file, probabilistic truncation, fresh product operands, circuit
// comparisons (the default options). Party 2 (the dealer) sends nothing
// online. Tested against measured runs.
struct Add2Costs {
  static OpCost mul(std::size_t n) { return both(1, 16 * n); }
  static OpCost truncate(std::size_t) { return {}; }
  static OpCost bits_and(std::size_t n) { return both(1, 16 * n); }
  // The generate gate, then Kogge-Stone levels of two gates in one message
  // (one in the last): 4 words per element and level.
  static OpCost to_bits(int width, std::size_t n) {
    const std::uint64_t levels = log2_ceil(static_cast<std::uint64_t>(width));
    return both(1 + levels, 32 * levels * n);
  }
  static OpCost bit_to_arith(std::size_t n) { return both(1, n); }             // a byte each
  static OpCost bit_dot(std::size_t n, std::size_t) { return both(1, 9 * n); }  // a byte and a word
  // Packed planes (add2_msb.cpp): m = w - 1 planes for the private AND, then
  // a tree whose level of p pairs ANDs 2p - 1 planes (two words a plane).
  static OpCost msb_bits(int width, std::size_t n, std::size_t) {
    const std::uint64_t words = (n + 63) / 64;
    std::uint64_t planes = static_cast<std::uint64_t>(width - 1), rounds = 1;
    for (std::uint64_t groups = planes; groups > 1; groups = groups / 2 + groups % 2, ++rounds)
      planes += 2 * (2 * (groups / 2) - 1);
    return both(rounds, 8 * planes * words);
  }

 protected:
  static OpCost both(std::uint64_t rounds, std::uint64_t bytes) { return {rounds, {bytes, bytes, 0}}; }

 private:
  static std::uint64_t log2_ceil(std::uint64_t n) {
    std::uint64_t l = 0;
    while ((std::uint64_t{1} << l) < n) ++l;
    return l;
  }
};

// add2's costs with comparisons = dcf: msb_bits opens x + r, the low w bits
// in ceil(w/8) bytes each way, and evaluates the dealt keys locally.
struct Add2DcfCosts : Add2Costs {
  static OpCost msb_bits(int width, std::size_t n, std::size_t) {
    return both(1, bytes_per_word(width) * n);
  }
};

// How a shared input is masked for products: x = opened + V, `opened`
// known to both parties, V additively shared (the owner holds all of it:
// the other party's part is zero and left empty) and known to the dealer.
// A product with such an operand opens nothing for it, however often it is
// used: weights and the embedding table cost their masked opening once, at
// sharing time, instead of at every token (a Beaver triple with a fixed
// second factor, as SecureML's matrix triples).
struct Add2Mask {
  std::optional<RingTensor> opened;  // x - V at parties 0 and 1; none at the dealer
  std::optional<RingTensor> mask;    // this party's part of V (none: zero); the dealer: V
};

struct Add2Share {
  RingTensor value;  // this party's additive component (zeros at the dealer)
  // Set by input() and kept by structural transforms (reshape, slice,
  // public permutations); arithmetic results have none.
  std::shared_ptr<const Add2Mask> fixed;
};

// XOR sharing of 64-bit words: x = b0 ^ b1.
struct Add2Bits {
  RingTensor value;
};

// How msb_bits (and so every comparison) runs: `circuit`, the parties'
// own components compared on packed bit planes (1 + ceil(log2(w-1))
// rounds, a few dealt bits); `dcf`, one opening of x + r and a distributed
// comparison function the dealer keys (1 round, about 16 w dealt bytes per
// element and party).
enum class Add2Comparisons : std::uint8_t { circuit, dcf };

struct Add2Options {
  int frac_bits = default_frac_bits;
  // Exact truncation (one round per truncation) instead of the local,
  // probabilistic one, which fails with a small probability per product;
  // on by default. Parties and dealer must agree (checked at setup).
  bool exact_truncation = true;
  // Parties and dealer must agree (checked at setup, like truncation).
  Add2Comparisons comparisons = Add2Comparisons::circuit;
  // Derive the keys from this seed instead of the OS RNG: tests and
  // reproducible benches only.
  std::optional<std::uint64_t> insecure_seed;
  // Big local work (matmuls, large element-wise operations) is split over
  // this pool, which the caller owns and keeps alive as long as the party;
  // nullptr: everything runs on the loop's thread. Results do not depend on it.
  ComputePool* pool = nullptr;
};

class Add2;

// Long-lived state of one add2 party or of the dealer.
class Add2Party {
 public:
  // The dealer sends each party its key and the settings (one message each).
  static Task<std::unique_ptr<Add2Party>> setup(Endpoint& endpoint, Add2Options options = {});

  PartyId id() const noexcept { return id_; }
  bool is_dealer() const noexcept { return id_ == add2_dealer; }
  Endpoint& endpoint() noexcept { return *endpoint_; }
  int frac_bits() const noexcept { return options_.frac_bits; }
  // Parties and dealer open sessions in the same order.
  Add2 session();

  Add2Party(Endpoint& endpoint, Add2Options options, std::optional<PrgKey> k0, std::optional<PrgKey> k1);

 private:
  friend class Add2;
  Endpoint* endpoint_;
  PartyId id_;
  Add2Options options_;
  std::array<std::optional<Prg>, 2> prg_;  // k0, k1: party i has k_i, the dealer both
  std::uint64_t sessions_ = 0;
};

// The local operations (add, add_public, apply2, bits_xor, ...) come from
// LinearBase: a public constant enters party 0's component. Their results
// carry no fixed mask; apply, a structural transform, keeps it.
class Add2 : public LinearBase<Add2, ShareParts<Add2Share, &Add2Share::value>, ShareParts<Add2Bits, &Add2Bits::value>> {
 public:
  using Share = Add2Share;
  using Bits = Add2Bits;
  using Costs = Add2Costs;
  using DcfCosts = Add2DcfCosts;  // the cost model under comparisons = dcf

  Add2(Add2Party& party, StreamId stream) : party_(&party), stream_(without_scope(stream)) {}  // as Rss3's
  Add2(Add2&&) noexcept = default;
  Add2& operator=(Add2&&) noexcept = default;
  Add2(const Add2&) = delete;
  Add2& operator=(const Add2&) = delete;

  PartyId party_id() const noexcept { return party_->id_; }
  bool dcf_comparisons() const noexcept { return party_->options_.comparisons == Add2Comparisons::dcf; }
  bool exact_truncation() const noexcept { return party_->options_.exact_truncation; }
  bool is_dealer() const noexcept { return party_->is_dealer(); }
  bool holds_input(PartyId owner) const noexcept { return owner == party_->id_ && !is_dealer(); }
  int frac_bits() const noexcept { return party_->options_.frac_bits; }
  StreamId stream() const noexcept { return stream_; }
  Add2 fork();
  CostTag cost_tag() const noexcept { return tag_; }
  void set_cost_tag(CostTag tag) noexcept { tag_ = tag; }

  using LinearBase::apply;
  template <class F>
  static Share apply(const Share& a, F&& f) {
    Share out{f(a.value), nullptr};
    if (a.fixed) {
      auto mask = make_shared<Add2Mask>();
      if (a.fixed->opened) mask->opened = f(*a.fixed->opened);
      if (a.fixed->mask) mask->mask = f(*a.fixed->mask);
      out.fixed = std::move(mask);
    }
    return out;
  }
  // No ApplyN: stacking one share through it would drop its fixed mask,
  // where ops' fallback (apply) keeps it and a later product opens nothing.
  template <class F>
  static Share apply_n(std::span<const Share* const> shares, F&& f) = delete;

  Task<Share> input(PartyId owner, std::optional<RingTensor> value, Shape shape);
  Task<RingTensor> reveal(const Share& a);
  Task<std::optional<RingTensor>> reveal_to(PartyId receiver, const Share& a);

  Task<Share> mul(const Share& a, const Share& b);
  Task<Share> matmul(const Share& a, const Share& b);
  Task<Share> truncate(const Share& a, int bits);
  Task<Share> mul_trunc(const Share& a, const Share& b, int bits = -1);
  Task<Share> matmul_trunc(const Share& a, const Share& b);

  Task<Bits> to_bits(const Share& a, int width = ring_bits);
  Task<Bits> bits_and(const Bits& x, const Bits& y);
  Task<Share> bit_to_arith(const Bits& x);
  Task<Share> bit_dot(const Bits& b, const Share& x, int bits = 0);
  Task<RingTensor> reveal_bits(const Bits& x);
  // Bit 0: 1 where a < 0 as a w-bit signed value (exact when |a| < 2^(w-1)):
  // a comparison of the parties' own components on packed bit planes, or
  // (comparisons = dcf) one opening and a dealt DCF key.
  Task<Bits> msb_bits(const Share& a, int width = ring_bits);

 private:
  friend LinearBase;
  static constexpr const char* protocol_name = "add2";
  bool holds_public_part(std::size_t) const noexcept { return party_->id_ == 0; }
  ComputePool* compute_pool() const noexcept { return party_->options_.pool; }
  enum class Product { elementwise, matrix };
  // A product operand as (opened, mask): an input's fixed mask, or a fresh
  // one whose masked share `outgoing` still has to be sent.
  struct Operand {
    std::shared_ptr<const Add2Mask> fixed;
    RingTensor opened_now;               // fresh: filled once the masked shares are exchanged
    std::optional<RingTensor> mask_now;  // fresh: this party's share; the dealer: the whole mask
    RingTensor outgoing;                 // fresh, at parties 0 and 1: value - mask
    bool fresh() const { return !fixed; }
    const RingTensor& opened() const { return fixed ? *fixed->opened : opened_now; }
    const RingTensor* mask() const {  // nullptr: zero
      if (!fixed) return &*mask_now;
      return fixed->mask ? &*fixed->mask : nullptr;
    }
  };

  bool dealer() const noexcept { return party_->is_dealer(); }
  PartyId other() const noexcept { return party_->id_ == 0 ? 1 : 0; }
  RingTensor draw(int key, const Shape& s);  // from k0 or k1
  // A fresh mask: this party's share from its key; the dealer's is the sum.
  RingTensor draw_mask(const Shape& s);
  // Party 0's share of a dealt value is drawn from k0, party 1's arrives
  // from the dealer: the dealer draws party 0's and returns it.
  RingTensor draw_first_share(const Shape& s);
  void send(PartyId to, const RingTensor& t, int low_bits = ring_bits);
  Task<RingTensor> recv(PartyId from, Shape shape, int low_bits = ring_bits);
  // Parties 0 and 1: sends `mine`, returns the other party's tensor of its shape.
  Task<RingTensor> exchange(const RingTensor& mine);
  // Dealer: sends party 1 `total - first` (the second share of `total`).
  void deal(const RingTensor& total, const RingTensor& first);
  Task<RingTensor> dealt(const Shape& s);  // party 1: its dealt share
  Operand operand(const Share& x);
  Task<Share> product(const Share& a, const Share& b, Product kind);
  Task<Share> truncate_exact(RingTensor x, int bits);
  Share truncate_local(const RingTensor& x, int bits) const;
  static void check_bits(int bits);
  Task<Bits> and_gate(const RingTensor& x, const RingTensor& y);
  // x & y for x held whole by party 0 and y by party 1 (`mine`: this
  // party's): one masked word each way.
  Task<Bits> private_and(const RingTensor& mine);
  Task<Bits> msb_circuit(const Share& a, int width);
  Task<Bits> msb_dcf(const Share& a, int width);

  Add2Party* party_;
  StreamId stream_;
  std::array<std::uint64_t, 2> block_{};
  std::uint64_t forks_ = 0;
  CostTag tag_ = CostTag::other;
};


// The optional hooks (protocol.cppm) this backend offers, and those it
// deliberately lacks: a drifted signature is a compile error here, not a
// feature that silently switches off.
// Add2's dealer deals every correlation offline (no store to refill, no
// circuit to fall back to for a prefill) and it sends weights unpaced.
static_assert(Protocol<Add2> && SignBits<Add2> && DcfCostsOption<Add2> && TruncationModeOption<Add2> &&
              CostTagging<Add2>);
static_assert(!ArithmeticSign<Add2> && !DcfStoreCostsOption<Add2> && !CircuitComparisonsOption<Add2> && !ApplyN<Add2>);
static_assert(!TruncationPairsRefill<Add2> && !ComparisonStoreRefill<Add2> && !WeightPacing<Add2>);
static_assert(!ArithmeticSignCosts<Add2Costs> && !ArithmeticSignCosts<Add2DcfCosts>);

}  // namespace mpcache
