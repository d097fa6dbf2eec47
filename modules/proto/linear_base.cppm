// The local, communication-free operations of a linear sharing, written
// once for every backend whose share (and boolean share) is a fixed list of
// ring tensors per party: rss3's two components, add2's and plain's one.
// Each operation works component by component; a public constant enters
// the one component of the sharing that it belongs to, at the parties that
// hold that component. Nothing here sends a message, so a backend's rounds
// and bytes do not depend on it. (ref's shares are reals, not ring tensors:
// it keeps its own.)
export module mpcache.proto:linear_base;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

// The components of share type S, in the order apply visits them (which
// is the order storage writes them, share_components in :protocol).
// Results are built value-initialised, then each listed member set: any
// other member (add2's fixed mask) stays empty, as arithmetic results need.
template <class S, RingTensor S::*... Members>
struct ShareParts {
  using Type = S;
  static constexpr std::size_t count = sizeof...(Members);
  static_assert(count > 0, "a share has at least one component");

  static constexpr std::array<RingTensor S::*, count> members{Members...};

  static const RingTensor& first(const S& a) { return a.*members[0]; }
  template <class F>
  static S map(const S& a, F&& f) {
    S out{};
    ((out.*Members = f(a.*Members)), ...);
    return out;
  }
  template <class F>
  static S zip(const S& a, const S& b, F&& f) {
    S out{};
    ((out.*Members = f(a.*Members, b.*Members)), ...);
    return out;
  }
  // f(i, component i) for every component i.
  template <class F>
  static S map_indexed(const S& a, F&& f) {
    S out{};
    std::size_t i = 0;
    ((out.*Members = f(i++, a.*Members)), ...);
    return out;
  }
  // f(the same component of every share) for every component.
  template <class F>
  static S gather(std::span<const S* const> shares, F&& f) {
    S out{};
    std::vector<const RingTensor*> column(shares.size());
    auto one = [&](RingTensor S::*member) {
      for (std::size_t i = 0; i < shares.size(); ++i) column[i] = &(shares[i]->*member);
      out.*member = f(std::span<const RingTensor* const>(column));
    };
    (one(Members), ...);
    return out;
  }
};

// The base of such a backend (CRTP). Derived supplies, to this base only:
//   static constexpr const char* protocol_name   for error messages
//   bool holds_public_part(std::size_t i) const  whether its component i is
//       the one a public constant is added to (XORed into, for bits)
//   ComputePool* compute_pool() const             big element-wise work and
//       matmuls split over it (nullptr: the caller's thread); results do
//       not depend on it
template <class Derived, class SP, class BP>
class LinearBase {
  using S = typename SP::Type;
  using B = typename BP::Type;

 public:
  static Shape shape(const S& a) { return shape_of(SP::first(a)); }
  static Shape shape(const B& a) { return shape_of(BP::first(a)); }
  // Structural, component-wise transforms (protocol.cppm).
  template <class F>
  static S apply(const S& a, F&& f) { return SP::map(a, f); }
  template <class F>
  static B apply(const B& a, F&& f) { return BP::map(a, f); }
  template <class F>
  static S apply2(const S& a, const S& b, F&& f) { return SP::zip(a, b, f); }
  // The ApplyN hook (protocol.cppm): f(span of each share's component).
  template <class F>
  static S apply_n(std::span<const S* const> shares, F&& f) { return SP::gather(shares, f); }

  S add(const S& a, const S& b) const {
    return SP::zip(a, b, [pool = pool()](const RingTensor& x, const RingTensor& y) { return ring_add(x, y, pool); });
  }
  S sub(const S& a, const S& b) const {
    return SP::zip(a, b, [pool = pool()](const RingTensor& x, const RingTensor& y) { return ring_sub(x, y, pool); });
  }
  S neg(const S& a) const { return SP::map(a, [](const RingTensor& x) { return ring_neg(x); }); }
  S add_public(const S& a, const RingTensor& c) const {
    check_public_shape(SP::first(a), c, "add_public");
    return SP::map_indexed(a, [&](std::size_t i, const RingTensor& x) {
      return self().holds_public_part(i) ? ring_add(x, c, pool()) : x;
    });
  }
  S mul_public(const S& a, const RingTensor& c) const {  // elementwise, no truncation
    return SP::map(a, [&](const RingTensor& x) { return ring_mul(x, c, pool()); });
  }
  S matmul_public(const S& a, const RingTensor& c) const {  // (m,k) x public (k,n)
    return SP::map(a, [&](const RingTensor& x) { return ring_matmul(x, c, pool()); });
  }

  B bits_xor(const B& x, const B& y) const {
    return BP::zip(x, y, [pool = pool()](const RingTensor& u, const RingTensor& v) { return ring_xor(u, v, pool); });
  }
  B bits_xor_public(const B& x, const RingTensor& c) const {
    check_public_shape(BP::first(x), c, "bits_xor_public");
    return BP::map_indexed(x, [&](std::size_t i, const RingTensor& u) {
      return self().holds_public_part(i) ? ring_xor(u, c, pool()) : u;
    });
  }
  B bits_and_public(const B& x, const RingTensor& c) const {
    return BP::map(x, [&](const RingTensor& u) { return ring_and(u, c, pool()); });
  }
  B bits_shift_left(const B& x, int n) const {
    return BP::map(x, [n](const RingTensor& u) { return ring_shift_left(u, n); });
  }
  B bits_shift_right(const B& x, int n) const {  // logical
    return BP::map(x, [n](const RingTensor& u) { return ring_shift_right_logical(u, n); });
  }

 private:
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
  ComputePool* pool() const noexcept { return self().compute_pool(); }
  // Every party checks, also those whose components pass through unchanged.
  static void check_public_shape(const RingTensor& part, const RingTensor& c, const char* op) {
    if (part.shape() == c.shape()) return;
    require_same_shape(part, c, (std::string(Derived::protocol_name) + " " + op).c_str());
  }
};

}  // namespace mpcache
