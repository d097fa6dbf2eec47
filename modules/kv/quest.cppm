// Quest (Tang et al. 2024): the full cache cut into pages of `page` tokens,
// each with per-dimension key max and min (a ClusterList); per step the
// pages with the highest upper bound sum_i max(q_i max_i, q_i min_i) summed
// over the group's query heads (cuboid_bound), gathered whole, and the
// newest tokens. The bound's max is a comparison per page, dimension and
// query head, all in one batch; page ids stay secret.
export module mpcache.kv:quest;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :clusters;

export namespace mpcache::kv {

template <Protocol P>
class Quest {
 public:
  explicit Quest(std::size_t budget, std::size_t page = 16) : budget_(budget), page_(page) {
    if (budget_ < minimum_budget(page))
      throw budget_below_minimum("Quest", budget_, minimum_budget(page),
                                 "is below two pages of " + std::to_string(page_) +
                                     " (one selected, one for the newest tokens)");
  }
  static std::size_t minimum_budget(std::size_t page = 16) { return 2 * page; }
  std::string name() const { return "quest"; }
  void reset(std::size_t layers, std::size_t heads) {
    lists_.assign(layers, std::vector<ClusterList<P>>(heads));
    for (auto& l : lists_)
      for (auto& c : l) c.size = page_;
  }
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  bool reads_prefill_attention(std::size_t, std::size_t) const { return false; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      auto& list = lists_[step.layer][j];
      list.append_rows(p, (*step.cache)[j], list.length, t);
      const std::size_t f = list.complete(), k = (budget_ - page_) / page_;
      if (f <= k) {
        push_head(s, list_rows(list, 0, t));
        continue;
      }
      co_await list.summarise(p);
      auto bound = co_await cuboid_bound(p, (*step.queries)[j], *list.max_keys, *list.min_keys);
      auto top = co_await ops::topk(p, bound, k);
      auto one = co_await list.gather(p, top.indices);
      append_list_rows(list, list.tail_begin(), list.length, one);
      push_head(s, std::move(one));
    }
    co_return s;
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  std::size_t budget_, page_;
  std::vector<std::vector<ClusterList<P>>> lists_;
};

}  // namespace mpcache::kv
