// SnapKV (Li et al. 2024): the prefill's observation window votes for
// prefix tokens (accumulated attention, max-pooled), the top ones are kept
// once (secret positions); the recent window after. Budget B per KV head.
export module mpcache.kv:snapkv;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;

export namespace mpcache::kv {

template <Protocol P>
class SnapKv {
 public:
  explicit SnapKv(std::size_t budget, std::size_t window = 32, std::size_t kernel = 7)
      : budget_(budget), window_(std::min(window, budget / 2)), kernel_(kernel) {
    if (budget_ < minimum_budget())
      throw budget_below_minimum("SnapKV", budget_, minimum_budget(), "leaves no recent window");
    if (window_ == 0) throw Error(ErrorCode::invalid_argument, "SnapKV: a window of zero tokens");
  }
  // The recent window is half the budget (at most `window`), at least one token.
  static std::size_t minimum_budget() { return 2; }
  std::string name() const { return "snapkv"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    const std::size_t t = view.tokens, prefix = budget_ - window_;
    if (t <= budget_) co_return;
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j) {
      auto votes = accumulated_attention<P>((*view.probs)[j], view.group, t, t - window_);
      votes = detail::elements<P>(votes, 0, t - window_);
      auto pooled = co_await max_pool(p, votes);
      auto top = co_await ops::topk(p, pooled, prefix);
      state_[view.layer][j].prefix = std::move(top.indices);
    }
  }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_ || !state_[step.layer][0].prefix) co_return detail::whole_cache(p, step);
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      const auto& hc = (*step.cache)[j];
      Selection<P> one;
      co_await select_indices(p, hc, *state_[step.layer][j].prefix, one);
      detail::append_rows(p, hc, t - window_, t, one.keys[0], one.values[0], one.positions[0]);
      s.keys.push_back(std::move(one.keys[0]));
      s.values.push_back(std::move(one.values[0]));
      s.positions.push_back(std::move(one.positions[0]));
    }
    co_return s;
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  // 1-D max pooling, `kernel` wide, same size (windows clipped at the ends).
  Task<typename P::Share> max_pool(P& p, const typename P::Share& v) {
    const std::size_t n = P::shape(v).at(0), r = kernel_ / 2;
    std::vector<std::size_t> idx(n * kernel_);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < kernel_; ++k) {
        const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(i + k) - static_cast<std::ptrdiff_t>(r);
        idx[i * kernel_ + k] = static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(at, 0, std::ptrdiff_t(n) - 1));
      }
    auto windows = P::apply(v, [&](const RingTensor& t) { return ring_reshape(ring_take_last(t, idx), {n, kernel_}); });
    auto m = co_await ops::max_last(p, windows);  // (n, 1)
    co_return ops::reshape<P>(m, {n});
  }
  struct State {
    std::optional<typename P::Share> prefix;
  };
  std::size_t budget_, window_, kernel_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
