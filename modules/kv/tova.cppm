// TOVA (Oren et al. 2024): keeps the B - 1 tokens the current query attends
// most (a top-k over the step's observed attention), evicting one per step;
// the kept positions are secret.
export module mpcache.kv:tova;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;

export namespace mpcache::kv {

template <Protocol P>
class Tova {
 public:
  explicit Tova(std::size_t budget) : budget_(budget) {
    if (budget_ < minimum_budget())
      throw budget_below_minimum("TOVA", budget_, minimum_budget(), "keeps no token besides the newest");
  }
  static std::size_t minimum_budget() { return 2; }
  std::string name() const { return "tova"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    if (view.tokens < budget_) co_return;
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j) {
      auto last = accumulated_attention<P>((*view.probs)[j], view.group, view.tokens, view.tokens - 1);
      auto top = co_await ops::topk(p, last, budget_ - 1);
      state_[view.layer][j].kept = std::move(top.indices);
    }
  }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      State& st = state_[step.layer][j];
      const auto& hc = (*step.cache)[j];
      if (!st.kept) {
        s.keys.push_back(hc.keys);
        s.values.push_back(hc.values);
        s.positions.push_back(public_range(p, hc.keys, 0, t));
      } else {
        Selection<P> one;
        co_await select_indices(p, hc, *st.kept, one);
        detail::append_rows(p, hc, t - 1, t, one.keys[0], one.values[0], one.positions[0]);
        s.keys.push_back(std::move(one.keys[0]));
        s.values.push_back(std::move(one.values[0]));
        s.positions.push_back(std::move(one.positions[0]));
      }
      st.last = s.positions.back();
    }
    co_return s;
  }
  // Its selection follows the attention it observed: a speculative step's
  // row takes the row before's state of each layer (kv::LayerAdopting).
  void adopt_layer(const Tova& source, std::size_t layer) { state_.at(layer) = source.state_.at(layer); }
  bool selects_from_observed() const noexcept { return true; }
  Task<void> observe(P& p, const StepView<P>& step, const std::vector<typename P::Share>& probs) {
    for (std::size_t j = 0; j < probs.size(); ++j) {
      State& st = state_[step.layer][j];
      const std::size_t n = P::shape(probs[j]).back();
      if (n < budget_) continue;  // still below the budget: nothing to evict
      auto top = co_await ops::topk(p, detail::sum_group<P>(probs[j]), budget_ - 1);
      st.kept = co_await gather_values(p, *st.last, top.indices);
    }
  }

 private:
  struct State {
    std::optional<typename P::Share> kept;  // secret positions, budget - 1 of them
    std::optional<typename P::Share> last;  // positions of the last selection
  };
  std::size_t budget_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
