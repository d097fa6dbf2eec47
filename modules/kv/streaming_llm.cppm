// StreamingLLM (Xiao et al. 2023): attention sinks + the recent window, at
// a public, fixed budget B = tokens attended per KV head per step (the
// current token included). Positions are public, so nothing is compared:
// the selection is rows of the cache.
export module mpcache.kv:streaming_llm;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;

export namespace mpcache::kv {

template <Protocol P>
class StreamingLlm {
 public:
  explicit StreamingLlm(std::size_t budget, std::size_t sinks = 4) : budget_(budget), sinks_(sinks) {
    if (budget_ < minimum_budget(sinks))
      throw budget_below_minimum("StreamingLLM", budget_, minimum_budget(sinks),
                                 "leaves no recent window besides " + std::to_string(sinks_) + " sinks");
  }
  static std::size_t minimum_budget(std::size_t sinks = 4) { return sinks + 1; }
  std::string name() const { return "streaming_llm"; }
  void reset(std::size_t, std::size_t) {}
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  bool reads_prefill_attention(std::size_t, std::size_t) const { return false; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    Selection<P> s;
    for (const auto& hc : *step.cache) {
      auto k = ops::rows<P>(hc.keys, 0, sinks_), v = ops::rows<P>(hc.values, 0, sinks_);
      auto pos = public_range(p, hc.keys, 0, sinks_);
      detail::append_rows(p, hc, t - (budget_ - sinks_), t, k, v, pos);
      s.keys.push_back(std::move(k));
      s.values.push_back(std::move(v));
      s.positions.push_back(std::move(pos));
    }
    co_return s;
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  std::size_t budget_, sinks_;
};

}  // namespace mpcache::kv
