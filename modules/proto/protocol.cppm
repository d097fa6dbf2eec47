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
module;
#include "prelude.hpp"
export module mpcache.proto:protocol;
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

// Tags the messages a protocol object sends and awaits while the scope lives
// (forks taken meanwhile inherit the tag), then restores the previous tag.
// Backends without a network (plain, ref) have nothing to tag. A protocol
// object serves one coroutine at a time, so a scope held across co_await is
// safe: concurrent work runs on forks.
template <class P>
class CostScope {
 public:
  CostScope(P& p, CostTag tag) : p_(&p) {
    if constexpr (requires { p.set_cost_tag(tag); }) {
      previous_ = p.cost_tag();
      p.set_cost_tag(tag);
    }
  }
  ~CostScope() {
    if constexpr (requires(P& q) { q.set_cost_tag(CostTag::other); }) p_->set_cost_tag(previous_);
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
