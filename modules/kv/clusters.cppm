// Token clusters for page/cluster-wise selection (Quest pages, MPCache
// clusters): a list of tokens (keys, values, positions) cut into clusters of
// s adjacent tokens, with per-cluster, per-dimension key max and min computed
// once, when a cluster is complete. The newest tokens (1..s of them: the
// last cluster is never counted complete until a newer token exists) form
// the tail, which selections always include, so the current token is always
// attended. Gathering clusters is one one-hot over C clusters and one
// ops::cluster_gather (the paper's cluster-wise gather, one matmul) of a
// table whose rows are each token's [key | value | position], not a
// token-wise gather. InfLLM's blocks and MPCache's clusters use the same.
export module mpcache.kv:clusters;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;

export namespace mpcache::kv {

// Tokens (n*s, d), (n*s, d), (n*s) cut into n blocks of s: (n, s, 2d + 1),
// each token's [key | value | position] (one table, so one gather moves all
// three).
template <Protocol P>
typename P::Share token_blocks(const typename P::Share& keys, const typename P::Share& values,
                               const typename P::Share& positions, std::size_t s) {
  const std::size_t m = P::shape(keys).at(0), d = P::shape(keys).at(1);
  auto table = ops::concat_last<P>(ops::concat_last<P>(keys, values), ops::reshape<P>(positions, {m, 1}));
  return ops::reshape<P>(table, {m / s, s, 2 * d + 1});
}

// Token rows (m, 2d + 1) of such a table -> a one-head selection.
template <Protocol P>
Selection<P> unpack_tokens(const typename P::Share& table_rows) {
  const std::size_t m = P::shape(table_rows).at(0), d = (P::shape(table_rows).at(1) - 1) / 2;
  Selection<P> out;
  out.keys.push_back(ops::slice_last<P>(table_rows, 0, d));
  out.values.push_back(ops::slice_last<P>(table_rows, d, 2 * d));
  out.positions.push_back(ops::reshape<P>(ops::slice_last<P>(table_rows, 2 * d, 2 * d + 1), {m}));
  return out;
}

// The blocks of `table` (n, s, 2d + 1) picked by one-hot rows (k, n): one
// matmul (ops::cluster_gather) -> a one-head selection of k*s tokens.
template <Protocol P>
Task<Selection<P>> gather_blocks(P& p, const typename P::Share& hot, const typename P::Share& table) {
  co_return unpack_tokens<P>(co_await ops::cluster_gather(p, hot, table));
}

template <Protocol P>
struct ClusterList {
  using Share = typename P::Share;
  std::size_t size = 16;          // tokens per cluster
  std::optional<Share> keys;      // (A - first, d): tokens [first, A)
  std::optional<Share> values;    // (A - first, d)
  std::optional<Share> positions; // (A - first)
  std::size_t length = 0;         // A
  std::size_t first = 0;          // tokens before it were dropped (drop_before)
  std::optional<Share> max_keys, min_keys;  // (F, d) for the summarised clusters
  std::size_t summarised = 0;

  // Complete clusters: all but the newest 1..s tokens.
  std::size_t complete() const { return length == 0 ? 0 : (length - 1) / size; }
  std::size_t tail_begin() const { return complete() * size; }

  void append(const P& p, const Share& k, const Share& v, const Share& pos) {
    keys = keys ? ops::stack_rows<P>(*keys, k) : k;
    values = values ? ops::stack_rows<P>(*values, v) : v;
    positions = positions ? ops::concat_last<P>(*positions, pos) : pos;
    length = first + P::shape(*keys).at(0);
    (void)p;
  }
  // Public positions [begin, end) of a head cache.
  void append_rows(const P& p, const HeadCache<P>& hc, std::size_t begin, std::size_t end) {
    if (end <= begin) return;
    if (begin < hc.first)
      throw Error(ErrorCode::invalid_argument, "cluster list: the cache no longer holds token " +
                                                   std::to_string(begin) + " (it starts at " +
                                                   std::to_string(hc.first) + ")");
    append(p, ops::rows<P>(hc.keys, begin - hc.first, end - hc.first), ops::rows<P>(hc.values, begin - hc.first, end - hc.first),
           public_range(p, hc.keys, begin, end));
  }
  // Rows [begin, end) of the kept tokens, by position.
  Share key_rows(std::size_t begin, std::size_t end) const { return ops::rows<P>(*keys, begin - first, end - first); }
  // Forget tokens before `position` (they live elsewhere now); at least one
  // token stays.
  void drop_before(std::size_t position) {
    if (position <= first) return;
    if (position >= length)
      throw Error(ErrorCode::invalid_argument, "cluster list: cannot drop all " + std::to_string(length) + " tokens");
    keys = ops::rows<P>(*keys, position - first, length - first);
    values = ops::rows<P>(*values, position - first, length - first);
    positions = ops::slice_last<P>(*positions, position - first, length - first);
    first = position;
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
    auto block = key_rows(summarised * s, f * s);
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
    max_keys = max_keys ? ops::stack_rows<P>(*max_keys, new_max) : new_max;
    min_keys = min_keys ? ops::stack_rows<P>(*min_keys, new_min) : new_min;
    summarised = f;
  }

  // Clusters [0, f) as (f, s, 2d + 1): each token's [key | value | position].
  Share table(std::size_t f) const {
    const std::size_t s = size;
    if (first != 0) throw Error(ErrorCode::invalid_argument, "cluster list: tokens before " + std::to_string(first) + " were dropped");
    return token_blocks<P>(ops::rows<P>(*keys, 0, f * s), ops::rows<P>(*values, 0, f * s),
                           ops::slice_last<P>(*positions, 0, f * s), s);
  }

  // Clusters picked by one-hot rows (k, f) over clusters [0, f) -> keys,
  // values (k*s, d) and positions (k*s).
  Task<Selection<P>> gather_hot(P& p, const Share& hot) const {
    auto picked = table(P::shape(hot).at(1));
    co_return co_await gather_blocks(p, hot, picked);
  }

  // The clusters that one-hot rows (k, f) pick, attended in place with the
  // first `first_rows` rows and the tail [f size, length) (a ClusterPick).
  ClusterPick<P> pick(const Share& hot, std::size_t first_rows) const {
    if (first != 0) throw Error(ErrorCode::invalid_argument, "cluster list: tokens before " + std::to_string(first) + " were dropped");
    return ClusterPick<P>{&*keys, &*values, &*positions, hot, ops::ClusterSpan{size, first_rows}};
  }

  // Clusters at secret ids (k) among the complete ones.
  Task<Selection<P>> gather(P& p, const Share& ids) const {
    auto hot = co_await ops::one_hot(p, ids, complete());  // (k, F)
    co_return co_await gather_hot(p, hot);
  }
};

// Tokens [begin, end) of the list (by position) as a one-head selection.
template <Protocol P>
Selection<P> list_rows(const ClusterList<P>& list, std::size_t begin, std::size_t end) {
  const std::size_t b = begin - list.first, e = end - list.first;
  if (begin < list.first) throw Error(ErrorCode::invalid_argument, "cluster list: token " + std::to_string(begin) + " was dropped");
  Selection<P> sel;
  sel.keys.push_back(ops::rows<P>(*list.keys, b, e));
  sel.values.push_back(ops::rows<P>(*list.values, b, e));
  sel.positions.push_back(ops::slice_last<P>(*list.positions, b, e));
  return sel;
}

template <Protocol P>
void append_selection(Selection<P>& into, Selection<P>&& more) {
  into.keys[0] = ops::stack_rows<P>(into.keys[0], more.keys[0]);
  into.values[0] = ops::stack_rows<P>(into.values[0], more.values[0]);
  into.positions[0] = ops::concat_last<P>(into.positions[0], more.positions[0]);
}

// One selection head: `head` followed by public token-list rows [begin, end).
template <Protocol P>
void append_list_rows(const ClusterList<P>& list, std::size_t begin, std::size_t end, Selection<P>& sel) {
  if (end <= begin) return;
  append_selection(sel, list_rows(list, begin, end));
}

// A selection with every ClusterPick gathered into rows (for observers
// that need each attended token's key, value and position: the step
// probe, tests). The rows come in cluster_attention's weight order.
template <Protocol P>
Task<Selection<P>> materialize(P& p, Selection<P> sel) {
  for (std::size_t j = 0; j < sel.picks.size(); ++j) {
    if (!sel.picked(j)) continue;
    const ClusterPick<P>& pick = *sel.picks[j];
    const std::size_t s = pick.span.cluster, f = P::shape(pick.hot).at(1), length = P::shape(*pick.keys).at(0);
    auto rows = [&](std::size_t b, std::size_t e) {
      Selection<P> one;
      one.keys.push_back(ops::rows<P>(*pick.keys, b, e));
      one.values.push_back(ops::rows<P>(*pick.values, b, e));
      one.positions.push_back(ops::slice_last<P>(*pick.positions, b, e));
      return one;
    };
    auto table = token_blocks<P>(ops::rows<P>(*pick.keys, 0, f * s), ops::rows<P>(*pick.values, 0, f * s),
                                 ops::slice_last<P>(*pick.positions, 0, f * s), s);
    Selection<P> head = rows(0, pick.span.first);
    append_selection(head, co_await gather_blocks(p, pick.hot, table));
    append_selection(head, rows(f * s, length));
    sel.keys[j] = std::move(head.keys[0]);
    sel.values[j] = std::move(head.values[0]);
    sel.positions[j] = std::move(head.positions[0]);
  }
  sel.picks.clear();
  co_return sel;
}

// The bounding-box bound of each page's best key for a query group (g, d)
// (Quest's, ArkVale's cuboid-max): sum over the group's heads and the
// dimensions of max(q_i hi_i, q_i lo_i), over pages' max and min keys
// (F, d) -> (F). All g F d comparisons in one batch.
template <Protocol P>
Task<typename P::Share> cuboid_bound(P& p, const typename P::Share& queries, const typename P::Share& max_keys,
                                     const typename P::Share& min_keys) {
  const std::size_t g = P::shape(queries).at(0), f = P::shape(max_keys).at(0);
  auto q = ops::repeat_rows<P>(queries, f);  // row h f + c: query head h, for page c
  P pa = p.fork(), pb = p.fork();
  auto [a, b] = co_await when_all(pa.mul_trunc(q, ops::tile_rows<P>(max_keys, g)), pb.mul_trunc(q, ops::tile_rows<P>(min_keys, g)));
  auto a_less = co_await ops::less_than_bits(p, a, b);
  auto larger = co_await ops::select_by_bit(p, a_less, b, a);               // (g F, d)
  auto per_head = ops::reshape<P>(ops::sum_last<P>(larger), {g, f});
  co_return P::apply(per_head, [](const RingTensor& t) { return ring_sum_second_last(t); });  // (F)
}

}  // namespace mpcache::kv
