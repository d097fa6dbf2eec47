// The Protocol concept: what algorithm code (ops, kv, model) may use. A
// protocol object is one party's handle on one stream of a secure
// computation; fork() gives a sub-protocol its own stream (and randomness)
// so that independent work can run concurrently under when_all.
//
// Values are RingTensors in Z_2^64 (fixed-point encoded by the caller);
// `Share` is whatever the backend keeps per party. Linear operations are
// local; mul/matmul/truncate/reveal are coroutines that may talk to peers.
// Backends: rss3 (3 parties, replicated), add2 (2 parties, additive, with a
// dealer of correlations), plain (clear fixed point), ref (float64).
export module mpcache.proto:protocol;
import mpcache.std;
import mpcache.core;
import mpcache.async;

export namespace mpcache {

template <class P>
concept Protocol =
    std::movable<P> &&
    requires(P& p, const P& cp, const typename P::Share& a, const typename P::Share& b,
             const RingTensor& c, PartyId id, int bits, std::optional<RingTensor> v,
             const Shape& s) {
      typename P::Share;
      { cp.party_id() } -> std::convertible_to<PartyId>;
      { cp.holds_input(id) } -> std::convertible_to<bool>;
      { cp.frac_bits() } -> std::convertible_to<int>;
      { p.fork() } -> std::same_as<P>;
      { P::shape(a) } -> std::same_as<Shape>;
      // Structural, component-wise transforms (reshape, slice, concat, public
      // permutations): valid for any linear sharing, no communication.
      { P::apply(a, [](const RingTensor& t) { return t; }) } -> std::same_as<typename P::Share>;
      { P::apply2(a, b, [](const RingTensor& t, const RingTensor&) { return t; }) }
          -> std::same_as<typename P::Share>;
      // Secret input from `owner` (value given only there), public shape.
      { p.input(id, std::move(v), s) } -> std::same_as<Task<typename P::Share>>;
      { p.reveal(a) } -> std::same_as<Task<RingTensor>>;
      { p.reveal_to(id, a) } -> std::same_as<Task<std::optional<RingTensor>>>;
      // Local, linear.
      { cp.add(a, b) } -> std::same_as<typename P::Share>;
      { cp.sub(a, b) } -> std::same_as<typename P::Share>;
      { cp.neg(a) } -> std::same_as<typename P::Share>;
      { cp.add_public(a, c) } -> std::same_as<typename P::Share>;
      { cp.mul_public(a, c) } -> std::same_as<typename P::Share>;
      { cp.matmul_public(a, c) } -> std::same_as<typename P::Share>;
      // Interactive.
      { p.mul(a, b) } -> std::same_as<Task<typename P::Share>>;
      { p.matmul(a, b) } -> std::same_as<Task<typename P::Share>>;
      { p.truncate(a, bits) } -> std::same_as<Task<typename P::Share>>;
      { p.mul_trunc(a, b) } -> std::same_as<Task<typename P::Share>>;
      { p.matmul_trunc(a, b) } -> std::same_as<Task<typename P::Share>>;
    } &&
    // Boolean layer: XOR-shared 64-bit words, for comparisons and equality.
    requires(P& p, const P& cp, const typename P::Share& a, const typename P::Bits& x,
             const typename P::Bits& y, const RingTensor& c, int n) {
      typename P::Bits;
      { P::shape(x) } -> std::same_as<Shape>;
      { P::apply(x, [](const RingTensor& t) { return t; }) } -> std::same_as<typename P::Bits>;
      { p.to_bits(a, n) } -> std::same_as<Task<typename P::Bits>>;
      { p.bits_and(x, y) } -> std::same_as<Task<typename P::Bits>>;
      { cp.bits_xor(x, y) } -> std::same_as<typename P::Bits>;
      { cp.bits_xor_public(x, c) } -> std::same_as<typename P::Bits>;
      { cp.bits_and_public(x, c) } -> std::same_as<typename P::Bits>;
      { cp.bits_shift_left(x, n) } -> std::same_as<typename P::Bits>;
      { cp.bits_shift_right(x, n) } -> std::same_as<typename P::Bits>;
      { p.bit_to_arith(x) } -> std::same_as<Task<typename P::Share>>;
      // sum over the last axis of (bit 0 of x) * a, truncated by n bits (0:
      // exact): B2A fused with a product, (..., k) -> (..., 1). Where a
      // compared bit selects or weights values this saves B2A's extra round.
      { p.bit_dot(x, a, n) } -> std::same_as<Task<typename P::Share>>;
      { p.reveal_bits(x) } -> std::same_as<Task<RingTensor>>;
    };

// Optional: apply over many shares at once, component-wise: f gets the
// same component of each share (a span of tensors) and returns that
// component of the result. Stacking k shares side by side then copies each
// element once, where a chain of apply2 copies it up to k times (rss3 and
// plain, whose components are plain tensors).
template <class P>
concept ApplyN = Protocol<P> && requires(std::span<const typename P::Share* const> shares) {
  { P::apply_n(shares, [](std::span<const RingTensor* const> t) { return *t[0]; }) } -> std::same_as<typename P::Share>;
};

// Optional: sum_i a_i b_i for the communication of one product, each term
// (a_i, b_i) asked for when it is needed and dropped before the next, so
// that a long operand can stream from storage (rss3 sums its local products,
// then reshares once). ops::matmul_sum runs the terms as concurrent matmuls
// on backends without it: the same rounds; the same bytes where a product's
// traffic follows its inputs (add2's openings), none on plain and ref.
template <class P>
concept SummingMatmul =
    Protocol<P> && requires(P& p, std::size_t n,
                            std::function<std::pair<typename P::Share, typename P::Share>(std::size_t)> term) {
      { p.matmul_sum(n, term) } -> std::same_as<Task<typename P::Share>>;
    };

// Optional hook for exact non-linear ops. A backend whose shares are real
// numbers (ref: float64 clear text, at the fixed-point scale) computes
// these exactly, and the generic ops in mpcache.ops call them instead of
// their fixed-point approximations, so the reference is exact wherever an
// approximation would differ. Only ops (and the backend) test for it:
// kv and model code is written once against Protocol and reaches exact
// arithmetic through the ops it calls.
//   from_real, to_real    real values in and out (no fixed-point codes)
//   map_real(a, f)        f on every element, reals in, reals out
//   mul_real(a, r)        a * r for public reals r of a's shape, unrounded
//   exact_sign(a)         1 where a < 0, else 0 (msb)
//   exact_one_hot(i, n)   (..., n): 1 at column i of each row, none if i is
//                         outside [0, n)
//   exact_argmax_last(a)  {value, index} of each row's largest element, the
//                         lowest index on ties, shapes (..., 1)
//   exact_topk_last(a, k) {values, indices} of each row's k largest, value
//                         descending then index ascending, shapes (..., k)
//   to_words, from_words  the share's exact image as 64-bit words and back
//                         (storage: a page store writes and reads these)
template <class P>
concept ExactReals =
    Protocol<P> &&
    requires(P& p, const P& cp, const typename P::Share& a, const RealTensor& r, std::size_t n,
             const RingTensor& words, double (*f)(double)) {
      { cp.from_real(r) } -> std::same_as<typename P::Share>;
      { cp.to_real(a) } -> std::same_as<RealTensor>;
      { cp.map_real(a, f) } -> std::same_as<typename P::Share>;
      { cp.mul_real(a, r) } -> std::same_as<typename P::Share>;
      { cp.exact_sign(a) } -> std::same_as<typename P::Share>;
      { cp.exact_one_hot(a, n) } -> std::same_as<typename P::Share>;
      { cp.exact_argmax_last(a) } -> std::same_as<std::pair<typename P::Share, typename P::Share>>;
      { cp.exact_topk_last(a, n) } -> std::same_as<std::pair<typename P::Share, typename P::Share>>;
      { P::to_words(a) } -> std::same_as<RingTensor>;
      { P::from_words(words) } -> std::same_as<typename P::Share>;
    };

// A share's exact image as 64-bit word tensors, one per component in the
// order P::apply visits them (an ExactReals backend: its to_words), so that
// storage can write shares out and read them back bit for bit.
template <Protocol P>
std::vector<RingTensor> share_components(const typename P::Share& a) {
  if constexpr (ExactReals<P>) {
    return {P::to_words(a)};
  } else {
    std::vector<RingTensor> parts;
    (void)P::apply(a, [&parts](const RingTensor& t) {
      parts.push_back(t);
      return RingTensor{};
    });
    return parts;
  }
}

// Components of a share of P, counted without copying any of them.
template <Protocol P>
std::size_t share_component_count(const typename P::Share& a) {
  if constexpr (ExactReals<P>) {
    return 1;
  } else {
    std::size_t count = 0;
    (void)P::apply(a, [&count](const RingTensor&) {
      ++count;
      return RingTensor{};
    });
    return count;
  }
}

// The share whose components are `parts`; `layout` is any share of the
// same backend and party (it says how many components there are).
template <Protocol P>
typename P::Share share_from_components(const typename P::Share& layout, std::vector<RingTensor> parts) {
  const std::size_t count = share_component_count<P>(layout);
  if (parts.size() != count)
    throw Error(ErrorCode::invalid_argument, "share_from_components: " + std::to_string(parts.size()) +
                                                 " components for a share of " + std::to_string(count));
  if constexpr (ExactReals<P>) {
    return P::from_words(parts.front());
  } else {
    std::size_t next = 0;
    return P::apply(layout, [&](const RingTensor&) { return std::move(parts[next++]); });
  }
}

// Bytes a share holds in this process: every component tensor.
template <Protocol P>
std::size_t share_bytes(const typename P::Share& a) {
  if constexpr (ExactReals<P>) {
    const Shape s = P::shape(a);
    return std::accumulate(s.begin(), s.end(), std::size_t{1}, std::multiplies<>()) * sizeof(Ring);
  } else {
    std::size_t bytes = 0;
    (void)P::apply(a, [&bytes](const RingTensor& t) {
      bytes += t.size() * sizeof(Ring);
      return RingTensor{};
    });
    return bytes;
  }
}

// A backend's cost model: what the building blocks of the generic ops cost
// on it (OpCost: rounds, bytes sent per party) for n elements, exact for a
// fresh protocol object with default options. Ops that choose between
// algorithms by cost (top-k's method, the argmax tournament's group sizes)
// plan with `typename P::Costs`, so each backend's choice is made on its
// own costs. Backends without a network (plain, ref) use rss3's, so that
// they choose what the three-party run chooses and their results match it
// step for step.
//   mul(n)              products of n elements, both operands fresh
//   truncate(n)         truncation of n elements by the fixed-point bits
//   bits_and(n)         AND of n words of boolean shares
//   to_bits(w, n)       A2B of the low w bits (w >= 2)
//   bit_to_arith(n)     B2A of bit 0
//   bit_dot(n, k)       bit_dot over n elements summed in groups of k
//   msb_bits(w, n, i)   the sign bit of n values mod 2^w, run by the i-th
//                       fork of a fresh object (rss3 rotates its lead)
template <class C>
concept CostModel = requires(int w, std::size_t n) {
  { C::mul(n) } -> std::same_as<OpCost>;
  { C::truncate(n) } -> std::same_as<OpCost>;
  { C::bits_and(n) } -> std::same_as<OpCost>;
  { C::to_bits(w, n) } -> std::same_as<OpCost>;
  { C::bit_to_arith(n) } -> std::same_as<OpCost>;
  { C::bit_dot(n, n) } -> std::same_as<OpCost>;
  { C::msb_bits(w, n, n) } -> std::same_as<OpCost>;
};

template <Protocol P>
  requires CostModel<typename P::Costs>
using CostsOf = typename P::Costs;

// Optional: the sign of a mod 2^w (1 where a < 0 as a w-bit value) as an
// arithmetic 0/1 in one protocol, where msb_bits then bit_to_arith would
// take B2A's 2 rounds more (rss3 with comparisons = dcf: a DCF with a ring
// payload). ops::msb_arith falls back to that pair on other backends.
template <class P>
concept ArithmeticSign = Protocol<P> && requires(P& p, const typename P::Share& a, int w) {
  { p.msb_arith(a, w) } -> std::same_as<Task<typename P::Share>>;
};

// Optional beside it: msb_arith(a, w, result_bits), the sign needed only
// mod 2^result_bits (rss3 reshares fewer bytes); ops::msb passes
// result_bits only to a backend with this.
template <class P>
concept NarrowArithmeticSign = ArithmeticSign<P> && requires(P& p, const typename P::Share& a, int w) {
  { p.msb_arith(a, w, w) } -> std::same_as<Task<typename P::Share>>;
};

// Optional: the sign bit of a mod 2^w as a boolean share in the backend's
// own protocol (rss3 and add2: packed bit planes, or a DCF), where
// ops::msb_bits would otherwise convert the low w bits (to_bits) and shift.
template <class P>
concept SignBits = Protocol<P> && requires(P& p, const typename P::Share& a, int w) {
  { p.msb_bits(a, w) } -> std::same_as<Task<typename P::Bits>>;
};

// A cost model may price that hook: msb_arith(w, n, i) like msb_bits. Only
// the cost models of modes where it saves rounds have it (rss3's DcfCosts),
// so ops choose algorithms built on it only there.
template <class C>
concept ArithmeticSignCosts = CostModel<C> && requires(int w, std::size_t n) {
  { C::msb_arith(w, n, n) } -> std::same_as<OpCost>;
};

// What an arithmetic sign costs on C: the hook's price, or msb_bits + B2A.
// result_bits: the sign is needed only mod 2^result_bits (a model may price
// a narrower result: rss3's msb_arith reshares fewer bytes).
// A model that prices a narrower result (rss3's DcfCosts and DcfStoreCosts:
// msb_arith(w, n, i, result_bits)) satisfies NarrowArithmeticSignCosts.
template <class C>
concept NarrowArithmeticSignCosts = ArithmeticSignCosts<C> && requires(int w, std::size_t n) {
  { C::msb_arith(w, n, n, w) } -> std::same_as<OpCost>;
};

// A model may price a B2A needed only mod 2^result_bits (rss3's:
// bit_to_arith(n, result_bits), fewer bytes a word).
template <class C>
concept NarrowBitToArithCosts = CostModel<C> && requires(std::size_t n, int r) {
  { C::bit_to_arith(n, r) } -> std::same_as<OpCost>;
};

template <CostModel C>
OpCost bit_to_arith_cost(std::size_t n, int result_bits = ring_bits) {
  if constexpr (NarrowBitToArithCosts<C>) return C::bit_to_arith(n, result_bits);
  else return C::bit_to_arith(n);
}

template <CostModel C>
OpCost msb_arith_cost(int width, std::size_t n, std::size_t fork, int result_bits = ring_bits) {
  if constexpr (NarrowArithmeticSignCosts<C>) return C::msb_arith(width, n, fork, result_bits);
  else if constexpr (ArithmeticSignCosts<C>) return C::msb_arith(width, n, fork);
  else return C::msb_bits(width, n, fork) + bit_to_arith_cost<C>(n, result_bits);
}

// Optional: a backend whose comparisons run one of two ways, chosen by an
// option (rss3 and add2: circuit or dcf), names the second way's cost model
// P::DcfCosts and says which way it runs.
template <class P>
concept DcfCostsOption = Protocol<P> && CostModel<typename P::Costs> && CostModel<typename P::DcfCosts> &&
                         requires(const P& p) {
                           { p.dcf_comparisons() } -> std::convertible_to<bool>;
                         };

// Optional beside it: an offline store of dealt keys (rss3), whose online
// costs P::DcfStoreCosts prices, on when p.dcf_store().
template <class P>
concept DcfStoreCostsOption = DcfCostsOption<P> && CostModel<typename P::DcfStoreCosts> &&
                              requires(const P& p) {
                                { p.dcf_store() } -> std::convertible_to<bool>;
                              };

// Optional: whether the backend truncates exactly (rss3 and add2 with
// exact_truncation: floor(x / 2^d) or one more for every |x| < 2^62).
// Probabilistic truncation fails with probability about |x| / 2^64 per
// element, so ops keep their values near 2^(2f) there; where truncation is
// exact they may carry values up to 2^60 (a polynomial's high powers, a sum
// of many products) and save rounds by it. Backends without the hook
// (plain, which plans as rss3's default does) count as probabilistic.
template <class P>
concept TruncationModeOption = Protocol<P> && requires(const P& p) {
  { p.exact_truncation() } -> std::convertible_to<bool>;
};

template <Protocol P>
bool truncates_exactly(const P& p) {
  if constexpr (TruncationModeOption<P>) return p.exact_truncation();
  else return false;
}

// Optional: comparing on the circuit for a while under DCF comparisons
// (rss3: Rss3::compare_on_circuit, per stream, collective). A prefill's
// comparisons grow with the prompt and no store holds their keys, so
// generation and the service prefill on the circuit and switch back for
// the decode steps (mpcache.model's StepDriver).
template <class P>
concept CircuitComparisonsOption = DcfCostsOption<P> && requires(P& p, bool on) {
  { p.compare_on_circuit(on) } -> std::same_as<void>;
};

// Optional: an offline store of truncation pairs, refilled at a quiet point
// between steps (rss3 with exact truncation and a pairs budget:
// Rss3::refill_truncation_pairs(multiple, steps), which returns whether the
// party has such a store at all, and does nothing without one).
template <class P>
concept TruncationPairsRefill = Protocol<P> && requires(P& p, std::size_t n) {
  { p.refill_truncation_pairs(n, n) } -> std::same_as<Task<bool>>;
};

// Optional: an offline store of DCF comparison keys, refilled at a quiet
// point between steps from the demand since the last refill (rss3 with
// comparisons = dcf and an offline budget: Rss3::refill_comparisons(steps),
// which returns whether the party has a store, and does nothing without one).
template <class P>
concept ComparisonStoreRefill = DcfStoreCostsOption<P> && requires(P& p, std::size_t n) {
  { p.refill_comparisons(n) } -> std::same_as<Task<bool>>;
};

// Optional: pacing of a long run of weight inputs (rss3): the others
// confirm what they received, the owner waits for an earlier confirmation
// before it sends on, so its outboxes never hold the whole model.
template <class P>
concept WeightPacing = Protocol<P> && requires(P& p, PartyId owner) {
  { p.confirm_weights(owner) } -> std::same_as<void>;
  { p.weights_confirmed(owner) } -> std::same_as<Task<void>>;
};

// Optional: messages tagged with the operator that sends them
// (CostCounters::by_tag; rss3 and add2). Backends without a network (plain,
// ref) have nothing to tag: CostScope does nothing there.
template <class P>
concept CostTagging = Protocol<P> && requires(P& p, const P& cp, CostTag tag) {
  { cp.cost_tag() } -> std::convertible_to<CostTag>;
  { p.set_cost_tag(tag) } -> std::same_as<void>;
};

// f.template operator()<C>() with C the cost model p runs with, so that ops
// plan on the comparisons the backend will really run (with a store, on
// their online part):
//   with_costs(p, [&]<CostModel C>() { return tournament_plan<C>(rows, n); })
template <Protocol P, class F>
decltype(auto) with_costs(const P& p, F&& f) {
  if constexpr (DcfStoreCostsOption<P>)
    if (p.dcf_store()) return std::forward<F>(f).template operator()<typename P::DcfStoreCosts>();
  if constexpr (DcfCostsOption<P>)
    if (p.dcf_comparisons()) return std::forward<F>(f).template operator()<typename P::DcfCosts>();
  return std::forward<F>(f).template operator()<CostsOf<P>>();
}

// Tags the messages a protocol object sends and awaits while the scope lives
// (forks taken meanwhile inherit the tag), then restores the previous tag.
// Backends without a network (plain, ref) have nothing to tag. A protocol
// object serves one coroutine at a time, so a scope held across co_await is
// safe: concurrent work runs on forks.
template <class P>
class CostScope {
 public:
  CostScope(P& p, CostTag tag) : p_(&p) {
    if constexpr (CostTagging<P>) {
      previous_ = p.cost_tag();
      p.set_cost_tag(tag);
    }
  }
  ~CostScope() {
    if constexpr (CostTagging<P>) p_->set_cost_tag(previous_);
  }
  CostScope(const CostScope&) = delete;
  CostScope& operator=(const CostScope&) = delete;

 private:
  P* p_;
  CostTag previous_ = CostTag::other;
};

template <class P>
CostScope<P> cost_scope(P& p, CostTag tag) { return CostScope<P>(p, tag); }

}  // namespace mpcache
