// MPCache's selection in a decode step (members of MpCache<P>, declared in
// :mpcache): per KV head, the first cluster, the fine clusters the query
// picks (flat or hierarchical top-k over the summaries, as one-hot rows,
// attended in place: a ClusterPick) and the newest tokens; early ranking
// before the token is in the lists.
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
  (void)position;
  std::vector<P> forks;
  std::vector<Task<void>> tasks;
  const std::size_t owner = layer - 1;  // the layer that selected
  const bool summarising = owner < state_.size() && ranks_own(owner);
  const std::size_t heads = state_.empty() ? 0 : state_[0].size();
  forks.reserve(heads);
  for (std::size_t j = 0; j < heads; ++j) {
    if (summarising && state_[owner][j].list.full() > state_[owner][j].list.summarised) {
      forks.push_back(p.fork());
      tasks.push_back(summarise(forks.back(), state_[owner][j], state_[owner][j].list.full()));
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
  const std::optional<std::size_t> owner = o_.owner_of(view.layer);
  for (std::size_t j = 0; j < layer.size(); ++j) {
    if (!owner) {
      tasks.push_back(choose(forks[j], layer[j], (*view.scaled_queries)[j], view.position, layer[j].list.full(),
                             ranked_clusters(view.layer)));
      continue;
    }
    // A reranking layer: among the owner's choice for view.position, made
    // ahead (at the step before) or early (in this step, before this layer).
    const State& own = state_[*owner][j];
    const Share* hot = nullptr;
    std::size_t f = 0, id = 0;
    if (own.ranked && own.ranked->position == view.position) {
      hot = own.ranked->hot ? &*own.ranked->hot : nullptr;
      f = own.ranked->clusters, id = own.ranked->id;
    } else if (own.decided_at == view.position) {
      hot = own.picked_from > 0 ? &*own.hot : nullptr;
      f = own.picked_from, id = own.hot_id;
    } else {
      throw Error(ErrorCode::invalid_argument, "MPCache: a reranking layer ranks before its owner");
    }
    tasks.push_back(rerank(forks[j], layer[j], hot, id, (*view.scaled_queries)[j], view.position, f));
  }
  co_await when_all(std::move(tasks));
}

// The owning layer's choice for this step: from rank() when the decoder
// ranked early (before this token was in the list, over the clusters
// whose s tokens were all there: the same clusters complete() counts once
// it is) or ahead at the step before (rank_ahead), else ranked here. A
// speculative step's later row, ranking ahead, ranks here with the row
// before's queries: the pick that row would have made ahead. A sharing
// layer follows its owner's choice. The pick is attended in place: the first cluster, the picked ones among
// [1, f) and the tail from f * s (ClusterPick).
template <Protocol P>
Task<Selection<P>> MpCache<P>::select_head(P& p, const StepView<P>& step, std::size_t j) {
  const std::size_t t = step.position + 1;
  State& st = state_[step.layer][j];
  auto& list = st.list;
  const std::size_t appended = list.length - st.kept_count;
  list.append_rows(p, (*step.cache)[j], st.prompt_tokens + appended, t);
  if (const auto owner = o_.owner_of(step.layer)) co_return co_await select_shared(p, step, j, *owner);
  std::size_t f = 0;  // clusters [1, f) were candidates; the tail starts at f * s
  // An early rank saw the clusters complete before this token; a
  // speculative step's later row ranks before its step's earlier rows
  // are in the list: where those completed a cluster, rank again here.
  const std::size_t ranked = ranked_clusters(step.layer);
  if (o_.step_shares_pick && step.previous_queries && st.ranked) {
    // step_shares_pick: the step's first row's pick, ranked at the step
    // before over the clusters complete then (the tail holds the rest).
  } else if (o_.rank_ahead && step.previous_queries) {  // the pick the row before would have made ahead
    co_await choose(p, st, (*step.previous_queries)[j], step.position, list.complete(), ranked);
  } else if (!st.ranked || st.ranked->position != step.position || st.ranked->clusters != list.complete()) {
    co_await choose(p, st, (*step.queries)[j], step.position, list.complete(), ranked);
  }
  Ranked r = std::move(*st.ranked);
  st.ranked.reset();
  st.decided_at = step.position;
  st.hot = std::move(r.hot);
  st.hot_id = r.id;
  std::optional<Share> own_rows;  // an owner that ranked more than it attends: its best k
  if (st.hot) {
    f = r.clusters;
    const std::size_t k = picked_clusters(), rows = P::shape(*st.hot).at(0);
    if (rows > k) {
      own_rows = ops::rows<P>(*st.hot, 0, k);
      st.last_ids = ops::slice_last<P>(*r.ids, 0, k);
    } else {
      st.last_ids = r.ids;
    }
    if (o_.is_owner(step.layer)) st.lent_ids = std::move(r.ids);
  }
  st.picked_from = f;
  if (f == 0) co_return list_rows(list, 0, list.length);  // everything fits the budget
  Selection<P> one;
  one.keys.emplace_back(), one.values.emplace_back(), one.positions.emplace_back();
  one.picks.push_back(list.pick(own_rows ? *own_rows : *st.hot, /*first=*/list.size));
  co_return one;
}

// A sharing layer follows its owner's choice for this step: all the rows
// the owner ranked (its k, or ceil(share_widen * k)), or with share_rerank
// its own best k among them, ranked ahead (at the step before, among the
// owner's pick ahead), early, or here.
template <Protocol P>
Task<Selection<P>> MpCache<P>::select_shared(P& p, const StepView<P>& step, std::size_t j, std::size_t owner) {
  State& st = state_[step.layer][j];
  auto& list = st.list;
  const State& own = state_[owner][j];
  if (own.decided_at != step.position)
    throw Error(ErrorCode::invalid_argument, "MPCache: a sharing layer selects before its owner");
  const std::size_t f = own.picked_from;
  const Share* hot = nullptr;
  if (f > 0) {
    if (list.length < f * list.size)
      throw Error(ErrorCode::invalid_argument, "MPCache: a sharing layer holds fewer tokens than its owner picked from");
    if (o_.share_rerank) {
      const bool row_before = o_.rank_ahead && step.previous_queries;  // as the owner's choice
      if (!st.ranked || st.ranked->position != step.position || st.ranked->owner_pick != own.hot_id)
        co_await rerank(p, st, &*own.hot, own.hot_id, row_before ? (*step.previous_queries)[j] : (*step.queries)[j],
                        step.position, f);
      Ranked r = std::move(*st.ranked);
      st.ranked.reset();
      st.hot = std::move(r.hot);
      st.last_ids = std::move(r.ids);
      hot = &*st.hot;
    } else {
      hot = &*own.hot;
      st.last_ids = own.lent_ids ? own.lent_ids : own.last_ids;
    }
  }
  st.decided_at = step.position;
  st.picked_from = f;
  if (f == 0) co_return list_rows(list, 0, list.length);  // everything fits the budget
  Selection<P> one;
  one.keys.emplace_back(), one.values.emplace_back(), one.positions.emplace_back();
  one.picks.push_back(list.pick(*hot, /*first=*/list.size));
  co_return one;
}

// A reranking layer's pick among the owner's choice (owner_hot, (m, f)
// one-hot rows; none: everything fitted): its own similarity to every fine
// cluster, the candidates' picked by one product with the owner's rows
// (0/1: no truncation), its top-k of those, mapped back to clusters by one
// more product. With m <= k it takes the owner's rows.
template <Protocol P>
Task<void> MpCache<P>::rerank(P& p, State& st, const Share* owner_hot, std::size_t owner_pick, const Share& queries,
                              std::size_t position, std::size_t f) {
  const std::size_t k = picked_clusters();
  Ranked r{position, owner_hot ? f : 0, std::nullopt, std::nullopt, ++choices_, owner_pick};
  if (owner_hot) {
    const std::size_t m = P::shape(*owner_hot).at(0);
    if (m <= k) {
      r.hot = *owner_hot;
    } else {
      P ps = p.fork(), pq = p.fork();
      auto [done, query] = co_await when_all(summarise(ps, st, f), query_row(pq, queries));
      (void)done;
      auto every = ops::reshape<P>(co_await similarity(p, query, ops::rows<P>(*st.fine, 0, f)), {f, 1});
      Share candidates;
      {
        auto scope = cost_scope(p, CostTag::similarity);
        candidates = ops::reshape<P>(co_await p.matmul(*owner_hot, every), {m});
      }
      auto top = co_await top_onehot(p, candidates, k);  // (k, m)
      r.hot = co_await p.matmul(top, *owner_hot);         // (k, f)
    }
    r.ids = ids_of(p, *r.hot, f);
  }
  st.ranked = std::move(r);
}

// Ids (k) of one-hot rows (k, f).
template <Protocol P>
auto MpCache<P>::ids_of(P& p, const Share& hot, std::size_t f) -> Share {
  const std::size_t k = P::shape(hot).at(0);
  RingTensor iota = RingTensor::from_shape({f, 1});
  for (std::size_t i = 0; i < f; ++i) iota(i, 0) = i;
  return ops::reshape<P>(p.matmul_public(hot, iota), {k});
}

// Picks k of fine clusters [1, f) for the query group at `position` (an
// owner that lends its pick ranks more than it attends: `ranked` rows,
// best first): the one-hot and ids, kept in st.ranked; no pick when
// f <= k + 1 (every cluster fits the budget).
template <Protocol P>
Task<void> MpCache<P>::choose(P& p, State& st, const Share& queries, std::size_t position, std::size_t f,
                              std::size_t ranked) {
  const std::size_t k = picked_clusters();
  Ranked r{position, f, std::nullopt, std::nullopt, ++choices_, 0};
  if (f > k + 1) {
    const std::size_t rows = std::min(std::max(k, ranked), f - 1);
    P ps = p.fork(), pq = p.fork();
    auto [done, query] = co_await when_all(summarise(ps, st, f), query_row(pq, queries));
    (void)done;
    auto hot = co_await pick(p, st, query, rows, f);
    r.ids = ids_of(p, hot, f);
    r.hot = std::move(hot);
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

// Fine clusters among [1, f) (never cluster 0, always attended anyway):
// the one-hot (k, f) of the picked ones. Hierarchical: the coarse top-k's
// one-hot rows expand locally into the candidates' one-hot rows; one matmul
// picks the candidates' similarities; the fine top-k's one-hot rows then
// pick the clusters' one-hot rows in one more matmul. No index is ever
// one-hot encoded twice, and no token row moves (the decoder attends the
// picked clusters in place).
template <Protocol P>
auto MpCache<P>::pick(P& p, State& st, const Share& query, std::size_t k, std::size_t f) -> Task<Share> {
  const std::size_t c = f / 2;
  // One pick (k = 1) is an argmax: the flat tournament is exact and
  // cheaper than the coarse level at every length, unless the paper's
  // hierarchy is forced.
  const bool argmax = k == 1 && o_.flat_up_to > 0;
  if (!o_.hierarchical || argmax || c < 2 || f - 1 <= o_.flat_up_to) {
    auto sim = co_await similarity(p, query, ops::rows<P>(*st.fine, 1, f));
    co_return after_first(p, co_await top_onehot(p, sim, k));  // (k, f)
  }
  // Coarse level over coarse clusters 1..c-1 (coarse 0 holds the first cluster).
  const std::size_t candidates_coarse = c - 1;
  const std::size_t kc = std::min(candidates_coarse,
                                  std::max<std::size_t>((k + 1) / 2, static_cast<std::size_t>(std::ceil(o_.coarse_ratio * double(candidates_coarse)))));
  // Linear and bound similarities cost one word per cluster: every fine
  // cluster's is formed beside the coarse level, and the candidates' are
  // picked from those (n words), where gathering the candidates' summaries
  // moved n (d or 2d). The elementwise one costs comparisons per cluster:
  // there the candidates' summaries are gathered and scored alone.
  const bool score_every_fine = o_.similarity != Similarity::elementwise;
  auto coarse_hot = [&](P& q) -> Task<Share> {
    auto csim = co_await similarity(q, query, ops::rows<P>(*st.coarse, 1, c));
    co_return co_await top_onehot(q, csim, kc);  // (kc, c - 1) over coarse 1..c-1
  };
  Share chot, every_fine;
  if (score_every_fine) {
    P pc = p.fork(), pf = p.fork();
    auto [h, sims] = co_await when_all(coarse_hot(pc), similarity(pf, query, ops::rows<P>(*st.fine, 0, f)));
    chot = std::move(h);
    every_fine = ops::reshape<P>(sims, {f, 1});
  } else {
    chot = co_await coarse_hot(p);
  }
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
  // (st.fine may hold more than f rows: a cluster the current token just
  // filled is summarised but is still the tail.)
  Share fsim;
  if (score_every_fine) {
    auto scope = cost_scope(p, CostTag::similarity);
    fsim = ops::reshape<P>(co_await p.matmul(cand, every_fine), {n});  // 0/1 rows: no truncation
  } else {
    fsim = co_await similarity(p, query, co_await p.matmul(cand, ops::rows<P>(*st.fine, 0, f)));
  }
  if (n < k) throw Error(ErrorCode::invalid_argument, "MPCache: coarse level left too few clusters");
  auto fhot = co_await top_onehot(p, fsim, k);  // (k, n)
  co_return co_await p.matmul(fhot, cand);      // (k, f)
}

}  // namespace mpcache::kv
