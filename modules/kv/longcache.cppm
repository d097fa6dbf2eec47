// LongCache: sinks + the recent window + the tokens between them whose keys
// are most similar to the group's queries by cosine similarity q.k/|k|
// (unit keys computed once per token, secret positions from a top-k).
export module mpcache.kv:longcache;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;

export namespace mpcache::kv {

template <Protocol P>
class LongCache {
 public:
  explicit LongCache(std::size_t budget, std::size_t sinks = 4, std::size_t recent = 0)
      : budget_(budget), sinks_(sinks), recent_(recent ? recent : std::max<std::size_t>(4, budget / 8)) {
    if (budget_ < minimum_budget(sinks, recent))
      throw budget_below_minimum("LongCache", budget_, minimum_budget(sinks, recent),
                                 "leaves no token to select besides " + std::to_string(sinks_) +
                                     " sinks and a recent window of " + std::to_string(recent_));
  }
  // Sinks + the recent window (recent, or budget / 8 and at least 4) + one
  // selected token.
  static std::size_t minimum_budget(std::size_t sinks = 4, std::size_t recent = 0) {
    if (recent) return sinks + recent + 1;
    std::size_t budget = sinks + 5;
    while (budget <= sinks + std::max<std::size_t>(4, budget / 8)) ++budget;
    return budget;
  }
  std::string name() const { return "longcache"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  bool reads_prefill_attention(std::size_t, std::size_t) const { return false; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    co_return co_await select_every_head(p, step.cache->size(), [&](P& q, std::size_t j) {
      return select_head(q, step, j);
    });
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  struct State {
    std::optional<typename P::Share> unit;
    std::size_t normalised = 0;
  };
  // Cosine similarity of every token between the sinks and the recent window
  // to the group's queries; the top ones, plus the sinks and the window.
  Task<Selection<P>> select_head(P& p, const StepView<P>& step, std::size_t j) {
    const std::size_t t = step.position + 1;
    State& st = state_[step.layer][j];
    const auto& hc = (*step.cache)[j];
    std::optional<typename P::Share> sim;
    {
      auto scope = cost_scope(p, CostTag::similarity);
      // Unit keys k/|k| for the tokens not normalised yet.
      auto fresh = ops::rows<P>(hc.keys, st.normalised, t);
      const std::size_t d = P::shape(fresh).at(1);
      auto sq = ops::sum_last<P>(co_await p.mul_trunc(fresh, fresh));  // (m, 1)
      auto inv = co_await ops::rsqrt(p, sq);
      auto unit = co_await p.mul_trunc(fresh, ops::broadcast_last<P>(inv, d));
      st.unit = st.normalised == 0 ? unit : ops::stack_rows<P>(*st.unit, unit);
      st.normalised = t;
      sim = co_await group_scores(p, (*step.queries)[j], ops::rows<P>(*st.unit, sinks_, t - recent_));
    }
    ops::TopK<P> top;
    {
      auto scope = cost_scope(p, CostTag::topk);
      top = co_await ops::topk(p, *sim, budget_ - sinks_ - recent_);
    }
    RingTensor offset = ring_filled(P::shape(top.indices), sinks_);
    auto picked = p.add_public(top.indices, offset);
    auto k = ops::rows<P>(hc.keys, 0, sinks_), v = ops::rows<P>(hc.values, 0, sinks_);
    auto pos = public_range(p, hc.keys, 0, sinks_);
    Selection<P> one;
    co_await select_indices(p, hc, picked, one);
    k = ops::stack_rows<P>(k, one.keys[0]);
    v = ops::stack_rows<P>(v, one.values[0]);
    pos = ops::concat_last<P>(pos, one.positions[0]);
    detail::append_rows(p, hc, t - recent_, t, k, v, pos);
    Selection<P> out;
    out.keys.push_back(std::move(k));
    out.values.push_back(std::move(v));
    out.positions.push_back(std::move(pos));
    co_return out;
  }

  std::size_t budget_, sinks_, recent_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
