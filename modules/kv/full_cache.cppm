// FullCache: every cached token, every step (the baseline without a
// policy).
export module mpcache.kv:full_cache;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;

export namespace mpcache::kv {

template <Protocol P>
class FullCache {
 public:
  FullCache() = default;
  explicit FullCache(std::size_t /*budget: every token, whatever it is*/) {}
  static std::size_t minimum_budget() { return 0; }
  std::string name() const { return "full"; }
  void reset(std::size_t, std::size_t) {}
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  bool reads_prefill_attention(std::size_t, std::size_t) const { return false; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) { co_return detail::whole_cache(p, step); }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }
};

}  // namespace mpcache::kv
