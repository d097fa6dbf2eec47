// AnyPolicy: a policy chosen at run time (by name, from a bench or CLI),
// type-erased behind the same interface; Tee: one prefill feeding several
// policies, so that a study prefills a prompt once and then decodes a copy
// of the decoder per policy.
export module mpcache.kv:any_policy;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :policy;

export namespace mpcache::kv {

template <Protocol P>
class AnyPolicy {
  using Share = typename P::Share;
  struct Iface {
    virtual ~Iface() = default;
    virtual std::string name() const = 0;
    virtual void reset(std::size_t layers, std::size_t heads) = 0;
    virtual Task<void> after_prefill(P& p, const PrefillView<P>& view) = 0;
    virtual Task<Selection<P>> select(P& p, const StepView<P>& step) = 0;
    virtual Task<void> observe(P& p, const StepView<P>& step, const std::vector<Share>& probs) = 0;
    virtual Task<void> prefetch(P& p, std::size_t layer, std::size_t position) = 0;
    virtual bool ranks_early(std::size_t layer) const = 0;
    virtual Task<void> rank(P& p, const RankView<P>& view) = 0;
    virtual bool owns_cache() const = 0;
    virtual std::optional<std::size_t> resident_bytes() const = 0;
    virtual std::size_t backing_bytes() const = 0;
    virtual std::unique_ptr<Iface> clone() const = 0;
  };
  template <class Pol>
  struct Impl final : Iface {
    Pol policy;
    explicit Impl(Pol pol) : policy(std::move(pol)) {}
    std::string name() const override { return policy.name(); }
    void reset(std::size_t layers, std::size_t heads) override { policy.reset(layers, heads); }
    Task<void> after_prefill(P& p, const PrefillView<P>& view) override { return policy.after_prefill(p, view); }
    Task<Selection<P>> select(P& p, const StepView<P>& step) override { return policy.select(p, step); }
    Task<void> observe(P& p, const StepView<P>& step, const std::vector<Share>& probs) override {
      return policy.observe(p, step, probs);
    }
    Task<void> prefetch(P& p, std::size_t layer, std::size_t position) override {
      if constexpr (Prefetching<Pol, P>) return policy.prefetch(p, layer, position);
      else return nothing();
    }
    bool ranks_early(std::size_t layer) const override {
      if constexpr (EarlyRanking<Pol, P>) return policy.ranks_early(layer);
      else return false;
    }
    Task<void> rank(P& p, const RankView<P>& view) override {
      if constexpr (EarlyRanking<Pol, P>) return policy.rank(p, view);
      else throw Error(ErrorCode::invalid_argument, "policy " + policy.name() + " does not rank early");
    }
    bool owns_cache() const override {
      if constexpr (OwnsCache<Pol, P>) return policy.owns_cache();
      else return false;
    }
    std::optional<std::size_t> resident_bytes() const override {
      if constexpr (OwnsCache<Pol, P>) return policy.resident_bytes();
      else return std::nullopt;
    }
    std::size_t backing_bytes() const override {
      if constexpr (OwnsCache<Pol, P>) return policy.backing_bytes();
      else return 0;
    }
    static Task<void> nothing() { co_return; }
    std::unique_ptr<Iface> clone() const override { return std::make_unique<Impl>(policy); }
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

  std::string name() const { return impl_->name(); }
  void reset(std::size_t layers, std::size_t heads) { impl_->reset(layers, heads); }
  Task<void> after_prefill(P& p, const PrefillView<P>& view) { return impl_->after_prefill(p, view); }
  Task<Selection<P>> select(P& p, const StepView<P>& step) { return impl_->select(p, step); }
  Task<void> observe(P& p, const StepView<P>& step, const std::vector<Share>& probs) {
    return impl_->observe(p, step, probs);
  }
  Task<void> prefetch(P& p, std::size_t layer, std::size_t position) {
    return impl_->prefetch(p, layer, position);
  }
  bool ranks_early(std::size_t layer) const { return impl_->ranks_early(layer); }
  Task<void> rank(P& p, const RankView<P>& view) { return impl_->rank(p, view); }
  // OwnsCache's members; resident_bytes() is nullopt for a policy that does
  // not count what it holds.
  bool owns_cache() const { return impl_->owns_cache(); }
  std::optional<std::size_t> resident_bytes() const { return impl_->resident_bytes(); }
  std::size_t backing_bytes() const { return impl_->backing_bytes(); }
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
