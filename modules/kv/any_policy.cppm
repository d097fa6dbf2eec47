// The KV policy interface listed once (MPCACHE_KV_POLICY_MEMBERS), and what
// is generated from the list: the defaults of the optional members
// (OptionalMembers) and AnyPolicy, a policy chosen at run time (by name,
// from a bench or CLI), type-erased behind the same interface. Also Tee: one
// prefill feeding several policies, so that a study prefills a prompt once
// and then decodes a copy of the decoder per policy.
//
// A new optional member is one line of the list: AnyPolicy forwards it, and
// OptionalMembers<P>::NAME(policy, ...) calls it or gives its default, for
// any policy; a policy that has it defines the member function.
export module mpcache.kv:any_policy;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :policy;

// Every member function of a KV policy, one line each:
//   REQUIRED(result, name, qualifier, (arguments), parameters...)
//   OPTIONAL(result, name, qualifier, default, (arguments), parameters...)
// The required ones are those of kv::Policy (policy.cppm, which says what
// they do). An optional one's `default` is what a policy without it gives;
// it may name `policy`. The optional members:
//   prefetch: once layer - 1 has selected at `position`, work for `layer`
//     that needs only earlier tokens (MPCache's index sharing gathers its
//     clusters); the decoder runs it concurrently with the rest of layer - 1
//     (kv::Prefetching, policy.cppm).
//   ranks_ahead: rank() for the next position, with this step's queries,
//     runs while the rest of the layer does (instead of prefetch).
//   ranks_early, rank: a policy whose ranking is invariant under a positive
//     scaling of the query ranks from RankView's scaled queries while the
//     norm runs (kv::EarlyRanking, policy.cppm).
//   owns_cache: the policy keeps the tokens it needs itself (MPCache's
//     cluster lists, ArkVale with a backing tier); the decoder then keeps
//     only the rows the policy has not yet taken (HeadCache::first): the
//     newest token's after a step, the prompt's until after_prefill has
//     taken them (unless a probe is installed: then it keeps them all).
//     Such a policy reads the cache only through rows [first, T), by
//     position, so it works over a whole cache too.
//   resident_bytes: the bytes the policy holds in memory besides the
//     decoder's cache; nullopt: not counted.
//   backing_bytes: the bytes it keeps elsewhere (a file).
//   reads_prefill_attention: whether after_prefill reads PrefillView::probs
//     for `layer` of a `tokens`-token prompt; if not, the decoder does not
//     keep them (heads x T^2 shares per layer) and passes none.
//   selects_from_observed: whether select() reads what observe() saw at
//     earlier steps (accumulated attention: H2O, TOVA, InfLLM). A
//     speculative step runs each row on a copy of the policy; such a
//     policy's rows take turns within each layer (kv::LayerAdopting).
//   adopts_layers: whether it has adopt_layer (kv::LayerAdopting, in
//     policy.cppm); AnyPolicy forwards adopt_layer between two copies of
//     the same kind. Speculation refuses a policy that selects from what it
//     observed but cannot adopt a layer.
#define MPCACHE_KV_POLICY_MEMBERS(REQUIRED, OPTIONAL)                                                          \
  REQUIRED(std::string, name, const, ())                                                                       \
  REQUIRED(void, reset, , (layers, heads), std::size_t layers, std::size_t heads)                              \
  REQUIRED(Task<void>, after_prefill, , (p, view), P& p, const PrefillView<P>& view)                           \
  REQUIRED(Task<Selection<P>>, select, , (p, step), P& p, const StepView<P>& step)                             \
  REQUIRED(Task<void>, observe, , (p, step, probs), P& p, const StepView<P>& step,                             \
           const std::vector<typename P::Share>& probs)                                                        \
  OPTIONAL(Task<void>, prefetch, , no_work(), (p, layer, position), P& p, std::size_t layer, std::size_t position) \
  OPTIONAL(bool, ranks_early, const, false, (layer), std::size_t layer)                                        \
  OPTIONAL(Task<void>, rank, , refuse(policy, "does not rank early"), (p, view), P& p, const RankView<P>& view) \
  OPTIONAL(bool, ranks_ahead, const, false, (layer), std::size_t layer)                                        \
  OPTIONAL(bool, owns_cache, const, false, ())                                                                 \
  OPTIONAL(std::optional<std::size_t>, resident_bytes, const, std::nullopt, ())                                \
  OPTIONAL(std::size_t, backing_bytes, const, 0, ())                                                           \
  OPTIONAL(bool, reads_prefill_attention, const, true, (layer, tokens), std::size_t layer, std::size_t tokens) \
  OPTIONAL(bool, selects_from_observed, const, false, ())                                                      \
  OPTIONAL(bool, adopts_layers, const, adopting(policy), ())

// `, x...` from `x...`, nothing from nothing: what follows the policy in a
// parameter list, or (as MPCACHE_KV_AFTER_POLICY (a, b)) in a call.
#define MPCACHE_KV_AFTER_POLICY(...) __VA_OPT__(, ) __VA_ARGS__
#define MPCACHE_KV_SKIP(...)

export namespace mpcache::kv {

// OptionalMembers<P>::NAME(policy, arguments...): the policy's own optional
// member NAME if it has one, else the default of the list. The decoder and
// AnyPolicy call optional members only this way.
template <Protocol P>
struct OptionalMembers {
#define MPCACHE_KV_CALL_OR_DEFAULT(result, member, qualifier, fallback, args, ...)  \
  template <class Pol>                                                              \
  static result member(qualifier Pol& policy MPCACHE_KV_AFTER_POLICY(__VA_ARGS__)) { \
    if constexpr (requires { policy.member args; }) return policy.member args;     \
    else return fallback;                                                           \
  }
  MPCACHE_KV_POLICY_MEMBERS(MPCACHE_KV_SKIP, MPCACHE_KV_CALL_OR_DEFAULT)
#undef MPCACHE_KV_CALL_OR_DEFAULT

 private:
  static Task<void> no_work() { co_return; }
  template <class Pol>
  static Task<void> refuse(const Pol& policy, const std::string& why) {
    throw Error(ErrorCode::invalid_argument, "policy " + std::string(policy.name()) + " " + why);
  }
  template <class Pol>
  static bool adopting(const Pol&) {
    return LayerAdopting<Pol>;
  }

 public:
  // policy.adopt_layer(source, layer), or an Error where it has none.
  template <class Pol>
  static void adopt_layer(Pol& policy, const Pol& source, std::size_t layer) {
    if constexpr (LayerAdopting<Pol>) policy.adopt_layer(source, layer);
    else throw Error(ErrorCode::invalid_argument, "policy " + std::string(policy.name()) + " cannot adopt a layer's state");
  }
};

template <Protocol P>
class AnyPolicy {
  struct Iface {
    virtual ~Iface() = default;
    virtual std::unique_ptr<Iface> clone() const = 0;
    virtual void adopt_layer_of(const Iface& source, std::size_t layer) = 0;
#define MPCACHE_KV_VIRTUAL(result, member, qualifier, args, ...) virtual result member(__VA_ARGS__) qualifier = 0;
#define MPCACHE_KV_OPTIONAL_VIRTUAL(result, member, qualifier, fallback, args, ...) \
  MPCACHE_KV_VIRTUAL(result, member, qualifier, args, __VA_ARGS__)
    MPCACHE_KV_POLICY_MEMBERS(MPCACHE_KV_VIRTUAL, MPCACHE_KV_OPTIONAL_VIRTUAL)
#undef MPCACHE_KV_OPTIONAL_VIRTUAL
#undef MPCACHE_KV_VIRTUAL
  };
  template <class Pol>
  struct Impl final : Iface {
    Pol policy;
    explicit Impl(Pol pol) : policy(std::move(pol)) {}
    std::unique_ptr<Iface> clone() const override { return std::make_unique<Impl>(policy); }
    void adopt_layer_of(const Iface& source, std::size_t layer) override {
      const auto* same = dynamic_cast<const Impl*>(&source);
      if (!same)
        throw Error(ErrorCode::invalid_argument,
                    "policy " + std::string(policy.name()) + " cannot adopt a layer of another kind of policy");
      OptionalMembers<P>::adopt_layer(policy, same->policy, layer);
    }
#define MPCACHE_KV_FORWARD(result, member, qualifier, args, ...) \
  result member(__VA_ARGS__) qualifier override { return policy.member args; }
#define MPCACHE_KV_FORWARD_OR_DEFAULT(result, member, qualifier, fallback, args, ...) \
  result member(__VA_ARGS__) qualifier override {                                     \
    return OptionalMembers<P>::member(policy MPCACHE_KV_AFTER_POLICY args);          \
  }
    MPCACHE_KV_POLICY_MEMBERS(MPCACHE_KV_FORWARD, MPCACHE_KV_FORWARD_OR_DEFAULT)
#undef MPCACHE_KV_FORWARD_OR_DEFAULT
#undef MPCACHE_KV_FORWARD
  };
  std::unique_ptr<Iface> impl_;

 public:
  template <class Pol>
    requires(Policy<Pol, P> && !std::same_as<std::remove_cvref_t<Pol>, AnyPolicy>)
  explicit AnyPolicy(Pol policy) : impl_(std::make_unique<Impl<Pol>>(std::move(policy))) {}
  AnyPolicy(const AnyPolicy& other) : impl_(other.impl_->clone()) {}
  AnyPolicy(AnyPolicy&&) noexcept = default;
  AnyPolicy& operator=(AnyPolicy other) noexcept {
    impl_ = std::move(other.impl_);
    return *this;
  }

  // Every member of the list, the optional ones with their defaults.
#define MPCACHE_KV_PUBLIC(result, member, qualifier, args, ...) \
  result member(__VA_ARGS__) qualifier { return impl_->member args; }
#define MPCACHE_KV_OPTIONAL_PUBLIC(result, member, qualifier, fallback, args, ...) \
  MPCACHE_KV_PUBLIC(result, member, qualifier, args, __VA_ARGS__)
  MPCACHE_KV_POLICY_MEMBERS(MPCACHE_KV_PUBLIC, MPCACHE_KV_OPTIONAL_PUBLIC)
#undef MPCACHE_KV_OPTIONAL_PUBLIC
#undef MPCACHE_KV_PUBLIC
  // The wrapped policy's adopt_layer, from a copy of the same kind.
  void adopt_layer(const AnyPolicy& source, std::size_t layer) { impl_->adopt_layer_of(*source.impl_, layer); }
};

// Feeds one prefill to every policy in `targets`; not for decoding.
template <Protocol P>
class Tee {
 public:
  explicit Tee(std::vector<AnyPolicy<P>>* targets) : targets_(targets) {}
  std::string name() const { return "tee"; }
  void reset(std::size_t layers, std::size_t heads) {
    for (auto& t : *targets_) t.reset(layers, heads);
  }
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    for (auto& t : *targets_) co_await t.after_prefill(p, view);
  }
  Task<Selection<P>> select(P&, const StepView<P>&) {
    throw Error(ErrorCode::invalid_argument, "Tee only feeds prefills; decode with one policy");
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  std::vector<AnyPolicy<P>>* targets_;
};

}  // namespace mpcache::kv

#undef MPCACHE_KV_SKIP
#undef MPCACHE_KV_AFTER_POLICY
#undef MPCACHE_KV_POLICY_MEMBERS
