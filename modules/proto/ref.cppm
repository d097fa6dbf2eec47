// ref: the Protocol interface on float64 clear text, the reference that the
// fidelity study runs on and that plain/rss3 results are compared against.
//
// A Ref value is the real number times 2^frac_bits, kept as a double: the
// same scale a fixed-point RingTensor has, so generic code that multiplies
// and then truncates means the same thing here, only without wrap-around and
// without rounding (truncate divides exactly). Public constants arrive as
// fixed-point RingTensors and are read as signed integers.
//
// Ref provides the ExactReals hook (:protocol): ops that have an exact form
// (exp, reciprocal, rsqrt, GeLU, SiLU, signs, max, top-k, one-hot) use it
// instead of the MPC-friendly approximation, so "ref" is float64 everywhere
// it matters.
// Comparisons through the boolean layer still work: to_bits rounds to the
// nearest integer first (values that reach the boolean layer are integers or
// fixed-point codes, whose last bit is noise anyway).
export module mpcache.proto:ref;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import :protocol;
import :rss3;

export namespace mpcache {

struct RefShare {
  RealTensor value;  // real value * 2^frac_bits
};

struct RefBits {
  RingTensor value;
};

// (m,k) x (k,n) in float64, cache-friendly loop order.
RealTensor real_matmul(const RealTensor& a, const RealTensor& b);

// Reads a ring tensor as signed integers.
RealTensor ring_to_real(const RingTensor& t);
// Rounds to the nearest integer, two's complement in the ring.
RingTensor real_to_ring(const RealTensor& t);

class Ref {
 public:
  using Share = RefShare;
  using Bits = RefBits;
  // plans as rss3 does, so it chooses what rss3 chooses
  using Costs = Rss3Costs;

  explicit Ref(int frac_bits = default_frac_bits);

  PartyId party_id() const noexcept { return 0; }
  bool holds_input(PartyId) const noexcept { return true; }
  int frac_bits() const noexcept { return frac_bits_; }
  Ref fork() const { return Ref(frac_bits_); }

  static Shape shape(const Share& a) { return Shape(a.value.shape().begin(), a.value.shape().end()); }
  static Shape shape(const Bits& a) { return shape_of(a.value); }

  // Structural and integer-linear ring transforms (reshape, slice, concat,
  // take, sums) applied to real values: the values are scaled to integers
  // with 2^16 headroom under 2^62, transformed in the ring, and scaled back,
  // which keeps ~46 significant bits of the largest element.
  template <class F>
  static Share apply(const Share& a, F&& f) {
    const int k = apply_scale(max_abs(a.value));
    return {from_scaled(f(to_scaled(a.value, k)), k)};
  }
  template <class F>
  static Bits apply(const Bits& a, F&& f) { return {f(a.value)}; }
  template <class F>
  static Share apply2(const Share& a, const Share& b, F&& f) {
    const int k = apply_scale(std::max(max_abs(a.value), max_abs(b.value)));
    return {from_scaled(f(to_scaled(a.value, k), to_scaled(b.value, k)), k)};
  }

  Task<Share> input(PartyId owner, std::optional<RingTensor> value, Shape shape);
  Task<RingTensor> reveal(const Share& a);
  Task<std::optional<RingTensor>> reveal_to(PartyId receiver, const Share& a);

  Share add(const Share& a, const Share& b) const;
  Share sub(const Share& a, const Share& b) const;
  Share neg(const Share& a) const;
  Share add_public(const Share& a, const RingTensor& c) const;
  Share mul_public(const Share& a, const RingTensor& c) const;
  Share matmul_public(const Share& a, const RingTensor& c) const;

  Task<Share> mul(const Share& a, const Share& b);
  Task<Share> matmul(const Share& a, const Share& b);
  Task<Share> truncate(const Share& a, int bits);
  Task<Share> mul_trunc(const Share& a, const Share& b, int bits = -1);
  Task<Share> matmul_trunc(const Share& a, const Share& b);

  Task<Bits> to_bits(const Share& a, int width = ring_bits);
  Task<Bits> bits_and(const Bits& x, const Bits& y);
  Bits bits_xor(const Bits& x, const Bits& y) const;
  Bits bits_xor_public(const Bits& x, const RingTensor& c) const;
  Bits bits_and_public(const Bits& x, const RingTensor& c) const;
  Bits bits_shift_left(const Bits& x, int n) const;
  Bits bits_shift_right(const Bits& x, int n) const;
  Task<Share> bit_to_arith(const Bits& x);
  Task<Share> bit_dot(const Bits& b, const Share& x, int bits = 0);
  Task<RingTensor> reveal_bits(const Bits& x);

  // The ExactReals hook (see :protocol for what each does).
  Share from_real(const RealTensor& x) const;  // real -> Ref value
  RealTensor to_real(const Share& a) const;    // Ref value -> real
  template <class F>
  Share map_real(const Share& a, F&& f) const {
    Share out{a.value};
    const double s = std::ldexp(1.0, frac_bits_), inv = 1.0 / s;
    for (auto& v : out.value) v = f(v * inv) * s;
    return out;
  }
  Share mul_real(const Share& a, const RealTensor& r) const;
  Share exact_sign(const Share& a) const;
  Share exact_one_hot(const Share& index, std::size_t classes) const;
  std::pair<Share, Share> exact_argmax_last(const Share& a) const;
  std::pair<Share, Share> exact_topk_last(const Share& a, std::size_t k) const;
  static RingTensor to_words(const Share& a);   // the doubles' bits
  static Share from_words(const RingTensor& words);

 private:
  static double max_abs(const RealTensor& t);
  static int apply_scale(double max_abs);
  static RingTensor to_scaled(const RealTensor& t, int k);
  static RealTensor from_scaled(const RingTensor& t, int k);

  int frac_bits_;
};


// The optional hooks (protocol.cppm) this backend offers, and those it
// deliberately lacks: a drifted signature is a compile error here, not a
// feature that silently switches off.
// Exact reals in one process: nothing to tag, pace, deal or refill.
static_assert(Protocol<Ref> && ExactReals<Ref>);
static_assert(!CostTagging<Ref> && !WeightPacing<Ref> && !DcfCostsOption<Ref> && !SignBits<Ref>);
static_assert(!CircuitComparisonsOption<Ref> && !TruncationPairsRefill<Ref> && !ComparisonStoreRefill<Ref>);

}  // namespace mpcache
