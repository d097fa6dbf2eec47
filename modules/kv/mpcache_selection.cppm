// MPCache's selection in a decode step (members of MpCache<P>, declared in
// :mpcache): per KV head, the first cluster, the fine clusters the query
// picks (flat or hierarchical top-k over the summaries, gathered with their
// one-hot rows) and the newest tokens; early ranking before the token is in
// the lists, and a sharing layer's gather of its owner's pick ahead of time.
export module mpcache.kv:mpcache_selection;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :clusters;
import :mpcache;

namespace mpcache::kv {

template <Protocol P>
Task<void> MpCache<P>::prefetch(P& p, std::size_t layer, std::size_t position) {
  std::vector<P> forks;
  std::vector<Task<void>> tasks;
  const std::size_t owner = layer - 1;
  const bool summarising = owner < state_.size() && !shares_previous(owner);
  const bool gathering = layer < state_.size() && shares_previous(layer);
  const std::size_t heads = state_.empty() ? 0 : state_[0].size();
  forks.reserve(2 * heads);
  for (std::size_t j = 0; j < heads; ++j) {
    if (summarising && state_[owner][j].list.full() > state_[owner][j].list.summarised) {
      forks.push_back(p.fork());
      tasks.push_back(summarise(forks.back(), state_[owner][j], state_[owner][j].list.full()));
    }
    if (gathering) {
      forks.push_back(p.fork());
      tasks.push_back(prefetch_head(forks.back(), layer, j, position));
    }
  }
  co_await when_all(std::move(tasks));
}

template <Protocol P>
Task<void> MpCache<P>::rank(P& p, const RankView<P>& view) {
  auto& layer = state_.at(view.layer);
  if (view.scaled_queries->size() != layer.size())
    throw Error(ErrorCode::invalid_argument, "MPCache: scaled queries for " +
                                                 std::to_string(view.scaled_queries->size()) + " KV heads, the layer has " +
                                                 std::to_string(layer.size()));
  std::vector<P> forks;
  forks.reserve(layer.size());
  std::vector<Task<void>> tasks;
  for (std::size_t j = 0; j < layer.size(); ++j) forks.push_back(p.fork());
  for (std::size_t j = 0; j < layer.size(); ++j)
    tasks.push_back(choose(forks[j], layer[j], (*view.scaled_queries)[j], view.position, layer[j].list.full()));
  co_await when_all(std::move(tasks));
}


template <Protocol P>
Task<void> MpCache<P>::prefetch_head(P& p, std::size_t layer, std::size_t j, std::size_t position) {
  State& st = state_[layer][j];
  const State& own = state_[layer - 1][j];
  if (!own.hot || own.decided_at != position || !st.list.keys) co_return;
  const std::size_t f = own.picked_from;
  if (st.list.length < f * st.list.size) co_return;
  st.prefetched = co_await st.list.gather_hot(p, *own.hot);
  st.prefetch_position = position;
}

// The owning layer's choice for this step: from rank() when the decoder
// ranked early (before this token was in the list, over the clusters
// whose s tokens were all there: the same clusters complete() counts once
// it is), else ranked here. A sharing layer follows its owner's choice.
template <Protocol P>
Task<Selection<P>> MpCache<P>::select_head(P& p, const StepView<P>& step, std::size_t j) {
  const std::size_t t = step.position + 1;
  State& st = state_[step.layer][j];
  auto& list = st.list;
  const std::size_t appended = list.length - st.kept_count;
  list.append_rows(p, (*step.cache)[j], st.prompt_tokens + appended, t);
  const std::size_t s = list.size;
  std::size_t f = 0;  // clusters [1, f) were candidates; the tail starts at f * s
  Selection<P> gathered;
  if (shares_previous(step.layer)) {
    const State& own = state_[step.layer - 1][j];
    if (own.decided_at != step.position)
      throw Error(ErrorCode::invalid_argument, "MPCache: a sharing layer selects before its owner");
    f = own.picked_from;
    if (f > 0) {
      if (st.prefetched && st.prefetch_position == step.position) {
        gathered = std::move(*st.prefetched);
      } else {
        gathered = co_await list.gather_hot(p, *own.hot);
      }
      st.last_ids = own.last_ids;
    }
    st.prefetched.reset();
  } else {
    if (!st.ranked || st.ranked->position != step.position)
      co_await choose(p, st, (*step.queries)[j], step.position, list.complete());
    Ranked r = std::move(*st.ranked);
    st.ranked.reset();
    st.decided_at = step.position;
    st.hot = std::move(r.hot);
    if (st.hot) {
      f = r.clusters;
      st.last_ids = std::move(r.ids);
      gathered = std::move(*r.gathered);
    }
    st.picked_from = f;
  }
  if (f == 0) co_return list_rows(list, 0, list.length);  // everything fits the budget
  Selection<P> one = list_rows(list, 0, s);  // the first cluster
  append_selection(one, std::move(gathered));
  append_list_rows(list, f * s, list.length, one);
  co_return one;
}

// Picks k of fine clusters [1, f) for the query group at `position`: the
// one-hot, ids and gathered rows, kept in st.ranked; no pick when f <= k + 1
// (every cluster fits the budget).
template <Protocol P>
Task<void> MpCache<P>::choose(P& p, State& st, const Share& queries, std::size_t position, std::size_t f) {
  const std::size_t k = picked_clusters();
  Ranked r{position, f, std::nullopt, std::nullopt, std::nullopt};
  if (f > k + 1) {
    P ps = p.fork(), pq = p.fork();
    auto [done, query] = co_await when_all(summarise(ps, st, f), query_row(pq, queries));
    (void)done;
    auto [hot, g] = co_await pick(p, st, query, k, f);
    RingTensor iota = RingTensor::from_shape({f, 1});
    for (std::size_t i = 0; i < f; ++i) iota(i, 0) = i;
    r.ids = ops::reshape<P>(p.matmul_public(hot, iota), {k});
    r.hot = std::move(hot);
    r.gathered = std::move(g);
  }
  st.ranked = std::move(r);
}

// One-hot rows (k, n) of the k best of n scores.
template <Protocol P>
auto MpCache<P>::top_onehot(P& p, const Share& scores, std::size_t k) -> Task<Share> {
  auto scope = cost_scope(p, CostTag::topk);
  co_return co_await ops::topk_onehot(p, scores, k);
}

// (k, n) -> (k, n + 1) with a zero first column (cluster 0 is never picked).
template <Protocol P>
auto MpCache<P>::after_first(const P& p, const Share& x) -> Share {
  const std::size_t k = P::shape(x).at(0);
  return ops::concat_last<P>(ops::public_share(p, x, ring_zeros({k, 1})), x);
}

// Fine clusters among [1, f) (never cluster 0, always attended anyway): the one-hot
// (k, f) of the picked ones and their gathered rows. Hierarchical: the
// coarse top-k's one-hot rows expand locally into the candidates' one-hot
// rows; one matmul gathers the candidates' summaries and rows together;
// the fine top-k's one-hot rows then pick both the clusters' one-hot and
// their rows in one more matmul. No index is ever one-hot encoded twice.
template <Protocol P>
auto MpCache<P>::pick(P& p, State& st, const Share& query, std::size_t k, std::size_t f)
    -> Task<std::pair<Share, Selection<P>>> {
  auto& list = st.list;
  const std::size_t c = f / 2, s = list.size, d = P::shape(*list.keys).at(1);
  // One pick (k = 1) is an argmax: the flat tournament is exact and
  // cheaper than the coarse level at every length (which also gathers
  // every candidate cluster's rows), unless the paper's hierarchy is forced.
  const bool argmax = k == 1 && o_.flat_up_to > 0;
  if (!o_.hierarchical || argmax || c < 2 || f - 1 <= o_.flat_up_to) {
    auto sim = co_await similarity(p, query, ops::rows<P>(*st.fine, 1, f));
    auto hot = after_first(p, co_await top_onehot(p, sim, k));  // (k, f)
    auto g = co_await list.gather_hot(p, hot);
    co_return std::pair{std::move(hot), std::move(g)};
  }
  // Coarse level over coarse clusters 1..c-1 (coarse 0 holds the first cluster).
  const std::size_t candidates_coarse = c - 1;
  const std::size_t kc = std::min(candidates_coarse,
                                  std::max<std::size_t>((k + 1) / 2, static_cast<std::size_t>(std::ceil(o_.coarse_ratio * double(candidates_coarse)))));
  auto csim = co_await similarity(p, query, ops::rows<P>(*st.coarse, 1, c));
  auto chot = co_await top_onehot(p, csim, kc);  // (kc, c - 1) over coarse 1..c-1
  // Candidates: children 2i and 2i+1 of the picked coarse clusters, then
  // the public fine cluster 1 and, if f is odd, the unpaired last one.
  std::vector<std::size_t> extra{1};
  if (f % 2 == 1) extra.push_back(f - 1);
  const std::size_t n = 2 * kc + extra.size();
  auto children = P::apply(chot, [=](const RingTensor& t) {
    RingTensor out = ring_zeros({2 * kc, f});
    for (std::size_t r = 0; r < kc; ++r)
      for (std::size_t i = 0; i + 1 < c; ++i) {
        out(r, 2 * (i + 1)) = t(r, i);
        out(kc + r, 2 * (i + 1) + 1) = t(r, i);
      }
    return out;
  });
  RingTensor fixed = ring_zeros({extra.size(), f});
  for (std::size_t e = 0; e < extra.size(); ++e) fixed(e, extra[e]) = 1;
  auto cand = ops::stack_rows<P>(children, ops::public_share(p, children, fixed));  // (n, f)
  const std::size_t w = P::shape(*st.fine).at(1);
  // (st.fine may hold more than f rows: a cluster the current token just
  // filled is summarised but is still the tail.)
  const std::size_t row = s * (2 * d + 1);  // one cluster's [key | value | position] rows, flat
  auto both = co_await p.matmul(cand, ops::concat_last<P>(ops::rows<P>(*st.fine, 0, f),
                                                          ops::reshape<P>(list.table(f), {f, row})));
  auto fsim = co_await similarity(p, query, ops::slice_last<P>(both, 0, w));
  if (n < k) throw Error(ErrorCode::invalid_argument, "MPCache: coarse level left too few clusters");
  auto fhot = co_await top_onehot(p, fsim, k);  // (k, n)
  auto picked = co_await p.matmul(fhot, ops::concat_last<P>(cand, ops::slice_last<P>(both, w, P::shape(both).at(1))));
  auto hot = ops::slice_last<P>(picked, 0, f);
  auto g = unpack_tokens<P>(ops::reshape<P>(ops::slice_last<P>(picked, f, f + row), {k * s, 2 * d + 1}));
  co_return std::pair{std::move(hot), std::move(g)};
}

}  // namespace mpcache::kv
