// plain: the Protocol interface on clear-text fixed-point values in one
// process. No messages, no rounds. Truncation is exact floor(x / 2^d), so
// rss3 results equal plain results up to truncation's last-bit error.
export module mpcache.proto:plain;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import :protocol;
import :linear_base;
import :rss3;

export namespace mpcache {

// What rss3's (and add2's) truncation would risk on these values: the
// SecureML-style truncation of x fails with probability about (|x|+1)/2^64
// per element (see rss3.cppm). Plain sees x exactly, so it can add those
// probabilities up by call site: the expected number of failures a run of
// the same code would meet under MPC. Forks share their parent's audit.
struct TruncationSite {
  double expected_failures = 0;  // sum over elements of (|x| + 1) / 2^64
  double max_abs = 0;            // largest |x| before truncation (ring units)
  std::uint64_t elements = 0;
  std::uint64_t calls = 0;
};
struct TruncationAudit {
  std::map<std::string, TruncationSite> sites;  // "file:line"
  void record(const RingTensor& before, std::source_location where);
  double expected_failures() const;
};

struct PlainShare {
  RingTensor value;
};

struct PlainBits {
  RingTensor value;
};

// The local operations (add, add_public, apply, bits_xor, ...) come from
// LinearBase, on the one component, which holds the whole value.
class Plain : public LinearBase<Plain, ShareParts<PlainShare, &PlainShare::value>,
                                ShareParts<PlainBits, &PlainBits::value>> {
 public:
  using Share = PlainShare;
  using Bits = PlainBits;
  // plans as rss3 does, so it chooses what rss3 chooses
  using Costs = Rss3Costs;

  explicit Plain(int frac_bits = default_frac_bits);

  PartyId party_id() const noexcept { return 0; }
  bool holds_input(PartyId) const noexcept { return true; }  // one process holds everything
  int frac_bits() const noexcept { return frac_bits_; }
  Plain fork() const {
    Plain child(frac_bits_);
    child.audit_ = audit_;
    return child;
  }
  // Record every truncation's input in `audit` (nullptr: stop recording).
  void audit_truncations(std::shared_ptr<TruncationAudit> audit) { audit_ = std::move(audit); }

  Task<Share> input(PartyId owner, std::optional<RingTensor> value, Shape shape);
  Task<RingTensor> reveal(const Share& a);
  Task<std::optional<RingTensor>> reveal_to(PartyId receiver, const Share& a);

  Task<Share> mul(const Share& a, const Share& b);
  Task<Share> matmul(const Share& a, const Share& b);
  // `where` names the caller for the truncation audit.
  Task<Share> truncate(const Share& a, int bits, std::source_location where = std::source_location::current());
  // bits < 0: frac_bits(). Other values truncate by `bits` in the same round.
  Task<Share> mul_trunc(const Share& a, const Share& b, int bits = -1,
                        std::source_location where = std::source_location::current());
  Task<Share> matmul_trunc(const Share& a, const Share& b,
                           std::source_location where = std::source_location::current());

  Task<Bits> to_bits(const Share& a, int width = ring_bits);
  Task<Bits> bits_and(const Bits& x, const Bits& y);
  Task<Share> bit_to_arith(const Bits& x);
  Task<Share> bit_dot(const Bits& b, const Share& x, int bits = 0,
                      std::source_location where = std::source_location::current());
  Task<RingTensor> reveal_bits(const Bits& x);
  // sum over the last axis of a b, truncated by `bits` (0: none), (..., k)
  // -> (...): rss3's dot_trunc in the clear, so that ops which sum products
  // in one round plan and compute here as they do there.
  Task<Share> dot_trunc(const Share& a, const Share& b, int bits = 0,
                        std::source_location where = std::source_location::current());

 private:
  friend LinearBase;
  static constexpr const char* protocol_name = "plain";
  bool holds_public_part(std::size_t) const noexcept { return true; }
  ComputePool* compute_pool() const noexcept { return nullptr; }
  RingTensor audited(const RingTensor& before, int bits, std::source_location where) const;

  int frac_bits_;
  std::shared_ptr<TruncationAudit> audit_;
};


// The optional hooks (protocol.cppm) this backend offers, and those it
// deliberately lacks: a drifted signature is a compile error here, not a
// feature that silently switches off.
// One process, no network: nothing to tag, pace, deal or refill.
static_assert(Protocol<Plain> && ApplyN<Plain> && !ExactReals<Plain>);
static_assert(!CostTagging<Plain> && !WeightPacing<Plain> && !DcfCostsOption<Plain> && !SignBits<Plain>);
static_assert(!CircuitComparisonsOption<Plain> && !TruncationPairsRefill<Plain> && !ComparisonStoreRefill<Plain>);

}  // namespace mpcache
