// Token clusters for page/cluster-wise selection (Quest pages, MPCache
// clusters): a list of tokens (keys, values, positions) cut into clusters of
// s adjacent tokens, with per-cluster, per-dimension key max and min computed
// once, when a cluster is complete. The newest tokens (1..s of them: the
// last cluster is never counted complete until a newer token exists) form
// the tail, which selections always include, so the current token is always
// attended. Gathering clusters is one one-hot over C clusters and one matmul
// (the paper's cluster-wise gather), not a token-wise gather.
module;
#include "prelude.hpp"
export module mpcache.kv:clusters;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
import :policy;

export namespace mpcache::kv {

template <Protocol P>
struct ClusterList {
  using Share = typename P::Share;
  std::size_t size = 16;          // tokens per cluster
  std::optional<Share> keys;      // (A, d)
  std::optional<Share> values;    // (A, d)
  std::optional<Share> positions; // (A)
  std::size_t length = 0;         // A
  std::optional<Share> max_keys, min_keys;  // (F, d) for the summarised clusters
  std::size_t summarised = 0;

  // Complete clusters: all but the newest 1..s tokens.
  std::size_t complete() const { return length == 0 ? 0 : (length - 1) / size; }
  std::size_t tail_begin() const { return complete() * size; }

  void append(const P& p, const Share& k, const Share& v, const Share& pos) {
    keys = keys ? stack_rows<P>(*keys, k) : k;
    values = values ? stack_rows<P>(*values, v) : v;
    positions = positions ? ops::concat_last<P>(*positions, pos) : pos;
    length = P::shape(*keys).at(0);
    (void)p;
  }
  // Public rows [begin, end) of a head cache.
  void append_rows(const P& p, const HeadCache<P>& hc, std::size_t begin, std::size_t end) {
    if (end > begin)
      append(p, rows<P>(hc.keys, begin, end), rows<P>(hc.values, begin, end),
             public_range(p, hc.keys, begin, end));
  }

  // Max and min keys of the clusters completed since the last call.
  Task<void> summarise(P& p) { co_await summarise_upto(p, complete()); }

  // Clusters that hold all `size` tokens, the newest one included (it is
  // still the tail, but its summary will not change).
  std::size_t full() const { return length / size; }

  // Max and min keys of clusters [summarised, f).
  Task<void> summarise_upto(P& p, std::size_t f) {
    if (f <= summarised) co_return;
    const std::size_t n = f - summarised, s = size, d = P::shape(*keys).at(1);
    // (n * d, s): row (c, i) holds dimension i of cluster c's s keys.
    auto block = rows<P>(*keys, summarised * s, f * s);
    auto spread = P::apply(block, [=](const RingTensor& t) {
      RingTensor out = RingTensor::from_shape({n * d, s});
      for (std::size_t c = 0; c < n; ++c)
        for (std::size_t r = 0; r < s; ++r)
          for (std::size_t i = 0; i < d; ++i) out((c * d + i), r) = t(c * s + r, i);
      return out;
    });
    P pa = p.fork(), pb = p.fork();
    auto [mx, neg_mn] = co_await when_all(ops::max_last(pa, spread), ops::max_last(pb, p.neg(spread)));
    auto new_max = ops::reshape<P>(mx, {n, d});
    auto new_min = ops::reshape<P>(p.neg(neg_mn), {n, d});
    max_keys = max_keys ? stack_rows<P>(*max_keys, new_max) : new_max;
    min_keys = min_keys ? stack_rows<P>(*min_keys, new_min) : new_min;
    summarised = f;
  }

  // Clusters at secret ids (k) -> keys, values (k*s, d) and positions (k*s).
  Task<Selection<P>> gather(P& p, const Share& ids) {
    const std::size_t f = complete(), s = size, d = P::shape(*keys).at(1);
    const std::size_t k = P::shape(ids).at(0);
    auto hot = co_await ops::one_hot(p, ids, f);  // (k, F)
    auto flat_k = ops::reshape<P>(rows<P>(*keys, 0, f * s), {f, s * d});
    auto flat_v = ops::reshape<P>(rows<P>(*values, 0, f * s), {f, s * d});
    auto flat_p = ops::reshape<P>(ops::slice_last<P>(*positions, 0, f * s), {f, s});
    P p1 = p.fork(), p2 = p.fork(), p3 = p.fork();
    auto [gk, gv, gp] = co_await when_all(p1.matmul(hot, flat_k), p2.matmul(hot, flat_v), p3.matmul(hot, flat_p));
    Selection<P> out;
    out.keys.push_back(ops::reshape<P>(gk, {k * s, d}));
    out.values.push_back(ops::reshape<P>(gv, {k * s, d}));
    out.positions.push_back(ops::reshape<P>(gp, {k * s}));
    co_return out;
  }
};

// One selection head: `head` followed by public token-list rows [begin, end).
template <Protocol P>
void append_list_rows(const ClusterList<P>& list, std::size_t begin, std::size_t end, Selection<P>& sel) {
  if (end <= begin) return;
  sel.keys[0] = stack_rows<P>(sel.keys[0], rows<P>(*list.keys, begin, end));
  sel.values[0] = stack_rows<P>(sel.values[0], rows<P>(*list.values, begin, end));
  sel.positions[0] = ops::concat_last<P>(sel.positions[0], ops::slice_last<P>(*list.positions, begin, end));
}

template <Protocol P>
Selection<P> list_rows(const ClusterList<P>& list, std::size_t begin, std::size_t end) {
  Selection<P> sel;
  sel.keys.push_back(rows<P>(*list.keys, begin, end));
  sel.values.push_back(rows<P>(*list.values, begin, end));
  sel.positions.push_back(ops::slice_last<P>(*list.positions, begin, end));
  return sel;
}

template <Protocol P>
void append_selection(Selection<P>& into, Selection<P>&& more) {
  into.keys[0] = stack_rows<P>(into.keys[0], more.keys[0]);
  into.values[0] = stack_rows<P>(into.values[0], more.values[0]);
  into.positions[0] = ops::concat_last<P>(into.positions[0], more.positions[0]);
}

// Tile a (1, d) row to (n, d).
template <Protocol P>
typename P::Share tile_row(const typename P::Share& row, std::size_t n) {
  return P::apply(row, [n](const RingTensor& t) {
    const std::size_t d = t.size();
    RingTensor out = RingTensor::from_shape({n, d});
    for (std::size_t r = 0; r < n; ++r) std::copy(t.data(), t.data() + d, out.data() + r * d);
    return out;
  });
}

// Quest: pages of the full cache, top pages by the per-dimension upper bound.
template <Protocol P>
class Quest {
 public:
  explicit Quest(std::size_t budget, std::size_t page = 16) : budget_(budget), page_(page) {
    if (budget_ < 2 * page_) throw Error(ErrorCode::invalid_argument, "Quest: budget below two pages");
  }
  std::string name() const { return "quest"; }
  void reset(std::size_t layers, std::size_t heads) {
    lists_.assign(layers, std::vector<ClusterList<P>>(heads));
    for (auto& l : lists_)
      for (auto& c : l) c.size = page_;
  }
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
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
      const auto& q = (*step.queries)[j];
      const std::size_t g = P::shape(q).at(0), d = P::shape(q).at(1);
      std::optional<typename P::Share> bound;
      for (std::size_t h = 0; h < g; ++h) {
        auto qh = tile_row<P>(rows<P>(q, h, h + 1), f);
        P pa = p.fork(), pb = p.fork();
        auto [a, b] = co_await when_all(pa.mul_trunc(qh, *list.max_keys), pb.mul_trunc(qh, *list.min_keys));
        auto a_less = co_await ops::less_than_bits(p, a, b);
        auto m = co_await ops::select_by_bit(p, a_less, b, a);
        auto ub = ops::reshape<P>(ops::sum_last<P>(m), {f});
        bound = bound ? p.add(*bound, ub) : ub;
      }
      (void)d;
      auto top = co_await ops::topk(p, *bound, k);
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
