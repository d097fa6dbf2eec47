// H2O (Zhang et al. 2023): a recent window + heavy hitters by accumulated
// attention, greedy eviction, at a public budget B per KV head. The heavy
// hitters' positions are secret (top-k over secret scores); a token that
// leaves the window competes with them by a top-k over secret scores
// gathered at secret positions, so which token was evicted stays secret.
export module mpcache.kv:h2o;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;

export namespace mpcache::kv {

template <Protocol P>
class H2O {
 public:
  // heavy_fraction of the budget goes to heavy hitters, the rest to the recent window.
  explicit H2O(std::size_t budget, double heavy_fraction = 0.5)
      : budget_(budget),
        heavy_(std::max<std::size_t>(1, static_cast<std::size_t>(heavy_fraction * double(budget)))) {
    if (budget_ < minimum_budget())
      throw budget_below_minimum("H2O", budget_, minimum_budget(), "leaves no recent window beside the heavy hitters");
    if (heavy_ >= budget_) throw Error(ErrorCode::invalid_argument, "H2O: heavy part must leave a recent window");
  }
  // One heavy hitter and one recent token.
  static std::size_t minimum_budget() { return 2; }
  std::string name() const { return "h2o"; }
  void reset(std::size_t layers, std::size_t heads) {
    state_.assign(layers, std::vector<State>(heads));
  }
  Task<void> after_prefill(P&, const PrefillView<P>& view) {
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j)
      state_[view.layer][j].score = accumulated_attention<P>((*view.probs)[j], view.group, view.tokens, 0);
    co_return;
  }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    const std::size_t recent_start = t - (budget_ - heavy_);
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      State& st = state_[step.layer][j];
      const auto& hc = (*step.cache)[j];
      st.score = detail::pad_to(p, st.score, t);
      if (!st.heavy) {  // first eviction: heavy hitters among everything before the window
        auto top = co_await ops::topk(p, detail::elements<P>(st.score, 0, recent_start), heavy_);
        st.heavy = std::move(top.indices);
      } else if (recent_start > st.window_start) {  // tokens that left the window compete
        auto cand = ops::concat_last<P>(*st.heavy, public_range(p, st.score, st.window_start, recent_start));
        auto cand_scores = co_await gather_values(p, st.score, cand);
        auto top = co_await ops::topk(p, cand_scores, heavy_);
        st.heavy = co_await gather_values(p, cand, top.indices);
      }
      st.window_start = recent_start;
      Selection<P> one;
      co_await select_indices(p, hc, *st.heavy, one);
      detail::append_rows(p, hc, recent_start, t, one.keys[0], one.values[0], one.positions[0]);
      s.keys.push_back(std::move(one.keys[0]));
      s.values.push_back(std::move(one.values[0]));
      s.positions.push_back(std::move(one.positions[0]));
    }
    co_return s;
  }
  // Its selection follows the attention it observed: a speculative step's
  // row takes the row before's state of each layer (kv::LayerAdopting).
  void adopt_layer(const H2O& source, std::size_t layer) { state_.at(layer) = source.state_.at(layer); }
  bool selects_from_observed() const noexcept { return true; }
  Task<void> observe(P& p, const StepView<P>& step, const std::vector<typename P::Share>& probs) {
    const std::size_t t = step.position + 1;
    for (std::size_t j = 0; j < probs.size(); ++j) {
      State& st = state_[step.layer][j];
      st.score = detail::pad_to(p, st.score, t);
      const std::size_t n = P::shape(probs[j]).back();
      auto positions = n == t ? public_range(p, st.score, 0, t) : last_positions(p, st, t);
      st.score = co_await detail::scatter_add(p, st.score, probs[j], positions);
    }
  }

 private:
  struct State {
    typename P::Share score;                  // accumulated attention per position
    std::optional<typename P::Share> heavy;   // secret positions of the heavy hitters
    std::size_t window_start = 0;
  };
  typename P::Share last_positions(const P& p, const State& st, std::size_t t) const {
    return ops::concat_last<P>(*st.heavy, public_range(p, st.score, st.window_start, t));
  }
  std::size_t budget_, heavy_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
