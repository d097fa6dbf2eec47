// MPCache (the paper's Algorithm 3):
//  * look-once static eviction at prefill: attention of the last 20% of the
//    prompt's queries, accumulated per token over the query group; keep the
//    top keep_ratio of the prompt (at least the budget), in position order;
//  * clusters of `cluster` adjacent kept tokens with per-dimension r_max and
//    r_min, summarised once per cluster as alpha*r_max + (1-alpha)*r_min so
//    that the similarity q . r costs one multiplication per dimension;
//  * hierarchical top-k: coarse clusters (2 fine clusters each) scored
//    first, the top coarse_ratio of them kept, then the fine clusters among
//    their children; the first cluster and the newest tokens (the tail) are
//    always attended;
//  * layer index sharing: from layer 2 on, each odd layer reuses the previous
//    layer's eviction and selection indices (no selection of its own).
// Under MPC every index stays secret; sizes follow from the public budget.
export module mpcache.kv:mpcache;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :clusters;

export namespace mpcache::kv {

// How a cluster's keys are scored against the query.
//   linear: q . (alpha r_max + (1 - alpha) r_min), the paper's MPC-friendly
//           similarity: one matmul, no comparison.
//   bound:  q+ . r_max + q- . r_min (q+ / q- the positive / negative parts of
//           each query head), which equals Quest's upper bound
//           sum_i max(q_i r_max_i, q_i r_min_i) because r_max >= r_min. It
//           needs the sign of the d query entries only (one comparison batch
//           of g*d elements, not C*d), then one matmul of twice the width.
//           A sharp head (e.g. an induction head copying one token) finds
//           its token's cluster by the bound, where the linear mix averages
//           the token away.
//   elementwise: the same bound computed the direct way, per step
//           sum_i max(q_i r_max_i, q_i r_min_i) over the group's summed
//           query: C*d products and C*d comparisons. It is the paper's
//           similarity before linearisation and reordering, kept for the
//           step-by-step ablation (paper-fig11), not for use.
enum class Similarity { linear, bound, elementwise };

// The defaults are ours, chosen on our model with the fidelity preset
// (float64, passkey retrieval and perplexity at 5, 10 and 20% budgets at
// 1k, 10% at 2k): the bound similarity, no static eviction and no layer
// index sharing keep passkey retrieval at 0.91-1.00 where the paper's
// options score 0.00-0.03 (README, "Choosing MPCache's defaults").
// paper() gives the paper's options.
struct MpCacheOptions {
  double keep_ratio = 1.0;      // static eviction keeps this share of the prompt (1: no eviction)
  double window_ratio = 0.2;    // queries used for static eviction
  std::size_t cluster = 16;     // fine cluster size (coarse = 2x)
  double coarse_ratio = 0.5;    // share of coarse clusters kept
  double alpha = 0.6;           // linear similarity only
  bool share_layers = false;
  bool hierarchical = true;
  // The coarse level saves comparisons (bytes) but adds a top-k and two
  // matmuls to the critical path; with at most this many fine candidates,
  // or a single pick (an argmax: its tournament compares about as many
  // pairs as the coarse level), the flat top-k (exact, and fewer rounds) is
  // used instead. 0: always hierarchical (the paper).
  std::size_t flat_up_to = 64;
  Similarity similarity = Similarity::bound;

  // The paper's Algorithm 3 defaults: 50% static eviction, the linear
  // similarity, odd layers sharing (with our flat top-k up to 64 candidates).
  static MpCacheOptions paper() {
    MpCacheOptions o;
    o.keep_ratio = 0.5;
    o.share_layers = true;
    o.similarity = Similarity::linear;
    return o;
  }
};

template <Protocol P>
class MpCache {
 public:
  using Share = typename P::Share;
  explicit MpCache(std::size_t budget, MpCacheOptions o = {}) : budget_(budget), o_(o) {
    if (budget_ < minimum_budget(o_))
      throw budget_below_minimum("MPCache", budget_, minimum_budget(o_),
                                 "is below three clusters of " + std::to_string(o_.cluster) +
                                     " (the first, the newest and one selected)");
  }
  static std::size_t minimum_budget(const MpCacheOptions& options = {}) { return 3 * options.cluster; }
  std::string name() const { return "mpcache"; }
  const MpCacheOptions& options() const noexcept { return o_; }

  // Fine clusters picked per step (besides the first cluster and the tail).
  std::size_t picked_clusters() const { return (budget_ - 2 * o_.cluster) / o_.cluster; }

  void reset(std::size_t layers, std::size_t heads) {
    state_.assign(layers, std::vector<State>(heads));
    for (auto& l : state_)
      for (auto& s : l) s.list.size = o_.cluster;
  }

  bool shares_previous(std::size_t layer) const { return o_.share_layers && layer >= 2 && layer % 2 == 1; }

  // Look-once static eviction, all KV heads at once: one batched top-k over
  // every head's accumulated attention, then (instead of a second sort into
  // position order) one comparison batch against each head's k-th key, whose
  // prefix sums give every kept token its slot: one one-hot, one matmul.
  // A sharing layer reuses the owning layer's compaction matrix. The
  // prompt's complete clusters are summarised here, not at the first step.
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    const std::size_t t = view.tokens, heads = state_[view.layer].size();
    const std::size_t keep = kept_tokens(t);
    const std::size_t window = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(o_.window_ratio * double(t))));
    const bool shared = shares_previous(view.layer);
    auto& layer = state_[view.layer];
    for (const auto& hc : *view.cache)
      if (hc.first != 0)
        throw Error(ErrorCode::invalid_argument, "MPCache: the prompt's look needs all its tokens; the cache starts at token " +
                                                     std::to_string(hc.first));
    if (keep == t) {
      for (std::size_t j = 0; j < heads; ++j) layer[j].list.append_rows(p, (*view.cache)[j], 0, t);
    } else {
      std::vector<Share> compaction;
      if (shared) {
        for (std::size_t j = 0; j < heads; ++j) {
          const auto& own = state_[view.layer - 1][j].compaction;
          if (!own) throw Error(ErrorCode::invalid_argument, "MPCache: a sharing layer before its owner");
          compaction.push_back(*own);
        }
      } else {
        compaction = co_await eviction(p, view, keep, window);
      }
      std::vector<P> forks;
      forks.reserve(heads);
      std::vector<Task<Share>> tasks;
      for (std::size_t j = 0; j < heads; ++j) forks.push_back(p.fork());
      for (std::size_t j = 0; j < heads; ++j) tasks.push_back(compact(forks[j], compaction[j], (*view.cache)[j]));
      auto kept = co_await when_all(std::move(tasks));
      const std::size_t d = P::shape((*view.cache)[0].keys).at(1);
      for (std::size_t j = 0; j < heads; ++j) {
        layer[j].list.append(p, ops::slice_last<P>(kept[j], 0, d), ops::slice_last<P>(kept[j], d, 2 * d),
                             ops::reshape<P>(ops::slice_last<P>(kept[j], 2 * d, 2 * d + 1), {keep}));
        if (!shared && shares_previous(view.layer + 1)) layer[j].compaction = std::move(compaction[j]);
      }
      if (shared)  // no later layer needs the owner's matrices
        for (auto& own : state_[view.layer - 1]) own.compaction.reset();
    }
    co_await after_eviction(p, view.layer, t);
  }

  // Only static eviction reads the prompt's attention weights (a sharing
  // layer reuses its owner's choice).
  bool reads_prefill_attention(std::size_t layer, std::size_t t) const {
    return kept_tokens(t) < t && !shares_previous(layer);
  }

  // Tokens static eviction keeps of a prompt of t.
  std::size_t kept_tokens(std::size_t t) const {
    return std::min(t, std::max(budget_, static_cast<std::size_t>(std::llround(o_.keep_ratio * double(t)))));
  }

  // Cost benchmarks at long contexts: the state static eviction leaves,
  // without running it. kept[j] holds KV head j's kept_tokens(prompt_tokens)
  // rows (keys, values (keep, d)), positions[j] their positions (keep).
  // Only the summaries are computed, as after_prefill would.
  Task<void> start_evicted(P& p, std::size_t layer, std::size_t prompt_tokens, const std::vector<HeadCache<P>>& kept,
                           const std::vector<Share>& positions) {
    auto& heads = state_.at(layer);
    if (kept.size() != heads.size() || positions.size() != heads.size())
      throw Error(ErrorCode::invalid_argument, "MPCache: kept rows for " + std::to_string(kept.size()) +
                                                   " heads, the layer has " + std::to_string(heads.size()));
    for (std::size_t j = 0; j < heads.size(); ++j) {
      if (P::shape(kept[j].keys).at(0) != kept_tokens(prompt_tokens))
        throw Error(ErrorCode::invalid_argument, "MPCache: " + std::to_string(P::shape(kept[j].keys).at(0)) +
                                                     " kept rows, static eviction keeps " +
                                                     std::to_string(kept_tokens(prompt_tokens)));
      heads[j].list.append(p, kept[j].keys, kept[j].values, positions[j]);
    }
    co_await after_eviction(p, layer, prompt_tokens);
  }

  // All KV heads at once (concurrent, so rounds do not grow with the head
  // count). A sharing layer does no summary and no selection: it gathers
  // with the owning layer's one-hot matrix (usually already prefetched).
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    co_return co_await select_every_head(p, step.cache->size(), [&](P& q, std::size_t j) {
      return select_head(q, step, j);
    });
  }

  // Once layer - 1 has selected at `position`, the decoder runs this
  // concurrently with the rest of layer - 1: a sharing `layer` gathers its
  // clusters (they hold only earlier tokens), and layer - 1 summarises the
  // cluster this token completed, so that no later step (an early rank
  // included) waits for that summary.
  Task<void> prefetch(P& p, std::size_t layer, std::size_t position) {
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

  // Early ranking (kv::EarlyRanking): every similarity here is positively
  // homogeneous in the query, so the scaled queries rank clusters as q does.
  // A sharing layer has nothing to rank.
  bool ranks_early(std::size_t layer) const { return !shares_previous(layer); }

  // Every KV head's pick for view.position, concurrently, before the current
  // token is in the lists: over the clusters whose tokens are all there.
  Task<void> rank(P& p, const RankView<P>& view) {
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

  Task<void> observe(P&, const StepView<P>&, const std::vector<Share>&) { co_return; }

  // The cluster lists hold every token a step can attend (the kept prompt,
  // then each new token as it arrives), and select() reads the decoder's
  // cache only at the new token: the decoder need not keep the prompt a
  // second time (OwnsCache).
  bool owns_cache() const noexcept { return true; }

  // Bytes this policy holds besides the decoder's cache (the summary's
  // "policy" bytes): per layer and KV head, its cluster list (the kept
  // tokens: keys, values, positions, and their clusters' max and min),
  // the summaries, and what a step picked or gathered ahead.
  std::size_t resident_bytes() const {
    std::size_t bytes = 0;
    auto add = [&bytes](const std::optional<Share>& a) { bytes += a ? share_bytes<P>(*a) : 0; };
    auto add_selection = [&bytes](const std::optional<Selection<P>>& s) {
      if (!s) return;
      for (const auto* part : {&s->keys, &s->values, &s->positions})
        for (const auto& a : *part) bytes += share_bytes<P>(a);
    };
    for (const auto& layer : state_)
      for (const auto& st : layer) {
        add(st.list.keys), add(st.list.values), add(st.list.positions), add(st.list.max_keys), add(st.list.min_keys);
        add(st.compaction), add(st.fine), add(st.coarse), add(st.hot), add(st.last_ids);
        if (st.ranked) add(st.ranked->hot), add(st.ranked->ids), add_selection(st.ranked->gathered);
        add_selection(st.prefetched);
      }
    return bytes;
  }

  // Secret fine-cluster ids picked for (layer, kv head) at the last step.
  const std::optional<Share>& last_ids(std::size_t layer, std::size_t head) const {
    return state_.at(layer).at(head).last_ids;
  }

 private:
  // A pick for the query at `position` among fine clusters [1, clusters);
  // no hot/ids/gathered when everything fitted.
  struct Ranked {
    std::size_t position = 0;
    std::size_t clusters = 0;
    std::optional<Share> hot;  // (k, clusters)
    std::optional<Share> ids;  // (k)
    std::optional<Selection<P>> gathered;
  };

  struct State {
    ClusterList<P> list;
    std::optional<Share> compaction;  // (keep, T) 0/1: static eviction, until the sharing layer used it
    std::size_t prompt_tokens = 0;
    std::size_t kept_count = 0;       // list rows that came from the prompt
    std::optional<Share> fine;        // (F, d): alpha*max + (1-alpha)*min; bound: (F, 2d) [max | min]
    std::optional<Share> coarse;      // (F/2, d or 2d) over pairs of fine clusters
    std::size_t coarse_count = 0;
    std::optional<Share> hot;         // (k, F) one-hot of the fine clusters picked at the last step
    std::optional<Share> last_ids;
    std::optional<Ranked> ranked;     // rank()'s pick, until select() at its position takes it
    std::size_t decided_at = std::size_t(-1);  // position of the last select()
    std::size_t picked_from = 0;      // its F (0: everything fitted, nothing picked)
    std::optional<Selection<P>> prefetched;  // sharing layer: gathered clusters for prefetch_position
    std::size_t prefetch_position = 0;
  };

  // The prompt's kept rows are in the lists: summarise its complete clusters
  // (not in a sharing layer: it never scores its own).
  Task<void> after_eviction(P& p, std::size_t layer_index, std::size_t prompt_tokens) {
    auto& layer = state_[layer_index];
    for (auto& st : layer) {
      st.prompt_tokens = prompt_tokens;
      st.kept_count = st.list.length;
    }
    if (shares_previous(layer_index)) co_return;
    std::vector<P> forks;
    forks.reserve(layer.size());
    std::vector<Task<void>> tasks;
    for (std::size_t j = 0; j < layer.size(); ++j) forks.push_back(p.fork());
    for (std::size_t j = 0; j < layer.size(); ++j) tasks.push_back(summarise(forks[j], layer[j], layer[j].list.full()));
    co_await when_all(std::move(tasks));
  }

  // (keep, T) 0/1 compaction matrices, per KV head, in position order.
  Task<std::vector<Share>> eviction(P& p, const PrefillView<P>& view, std::size_t keep, std::size_t window) {
    const std::size_t t = view.tokens, heads = view.probs->size();
    std::vector<Share> out;
    std::optional<Share> scores;  // (heads, T)
    for (std::size_t j = 0; j < heads; ++j) {
      auto row = ops::reshape<P>(accumulated_attention<P>((*view.probs)[j], view.group, t, t - window), {1, t});
      scores = scores ? ops::stack_rows<P>(*scores, row) : row;
    }
    // The kept test below compares sort keys with the k-th one's: the scores
    // must be codes, so that the keys order the tokens as the top-k did.
    scores = ops::detail::fixed_point_codes(p, *scores);
    // Accumulated attention sums at most t probabilities: |score| < 2t
    // (twice, for the approximations' error), so comparisons need only
    // frac + log2(t) + 3 bits, and the keys log2(t) more.
    const int width = ops::comparison_width(p.frac_bits(), ops::ceil_log2(t) + 1);
    auto top = co_await ops::topk(p, *scores, keep, ops::TopKMethod::automatic, {}, width);
    RingTensor iota = RingTensor::from_shape({heads, t});
    for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % t;
    const auto keys = ops::detail::sort_key(p, *scores, ops::public_share(p, *scores, iota), t);
    const auto kth = ops::detail::sort_key(p, ops::slice_last<P>(top.values, keep - 1, keep),
                                           ops::slice_last<P>(top.indices, keep - 1, keep), t);
    const auto kth_each = ops::broadcast_last<P>(kth, t);
    auto dropped = co_await ops::less_than(p, keys, kth_each,
                                           ops::detail::value_width(width, t) + ops::detail::key_shift(t));  // (heads, T)
    // Slot of kept token i: (kept tokens up to i) - 1; a dropped token gets a
    // slot past the end: (prefix - 1) + (keep + 1) * dropped, in [keep, 2 keep].
    auto kept = p.add_public(p.neg(dropped), ring_filled({heads, t}, 1));
    auto prefix = P::apply(kept, [t](const RingTensor& x) {
      RingTensor out = x;
      for (std::size_t r = 0; r < out.size(); r += t)
        for (std::size_t c = 1; c < t; ++c) out.data()[r + c] += out.data()[r + c - 1];
      return out;
    });
    auto slot = p.add(p.add_public(prefix, ring_filled({heads, t}, Ring(0) - 1)),
                      p.mul_public(dropped, ring_filled({heads, t}, Ring(keep + 1))));
    auto hot = co_await ops::one_hot(p, slot, keep, ops::ceil_log2(2 * keep + 1));  // (heads, T, keep)
    for (std::size_t j = 0; j < heads; ++j) {
      auto head = P::apply(hot, [=](const RingTensor& x) {
        RingTensor m = RingTensor::from_shape({keep, t});
        for (std::size_t i = 0; i < t; ++i)
          for (std::size_t r = 0; r < keep; ++r) m(r, i) = x.data()[(j * t + i) * keep + r];
        return m;
      });
      out.push_back(std::move(head));
    }
    co_return out;
  }

  // Kept rows of one head's prompt: (keep, 2d + 1) = [keys | values | position].
  Task<Share> compact(P& p, const Share& matrix, const HeadCache<P>& hc) {
    const std::size_t t = P::shape(hc.keys).at(0);
    auto table = ops::concat_last<P>(ops::concat_last<P>(hc.keys, hc.values),
                                     ops::reshape<P>(public_range(p, hc.keys, 0, t), {t, 1}));
    co_return co_await p.matmul(matrix, table);
  }

  Task<void> prefetch_head(P& p, std::size_t layer, std::size_t j, std::size_t position) {
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
  Task<Selection<P>> select_head(P& p, const StepView<P>& step, std::size_t j) {
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
  Task<void> choose(P& p, State& st, const Share& queries, std::size_t position, std::size_t f) {
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

  // Summaries of clusters [summarised, upto), only those: fine r_max / r_min
  // once per cluster, when its last token arrives (at prefill for the
  // prompt's clusters; during decode in prefetch, off the critical path),
  // coarse ones once per pair.
  Task<void> summarise(P& p, State& st, std::size_t upto) {
    auto scope = cost_scope(p, CostTag::summary);
    auto& list = st.list;
    const std::size_t before = list.summarised;
    co_await list.summarise_upto(p, upto);
    const std::size_t f = list.summarised;
    if (f == before) co_return;
    const FixedPoint fp(p.frac_bits());
    const std::size_t d = P::shape(*list.max_keys).at(1), n = f - before;
    auto mx = ops::rows<P>(*list.max_keys, before, f), mn = ops::rows<P>(*list.min_keys, before, f);
    const std::size_t c0 = st.coarse_count, c = f / 2;
    P pf = p.fork(), pc = p.fork();
    // A summary row from r_max and r_min (rows, d): bound: [max | min];
    // linear: alpha * max + (1 - alpha) * min (public weights, one truncation).
    auto mix = [&](P& q, const Share& hi, const Share& lo, std::size_t rows) -> Task<Share> {
      if (o_.similarity != Similarity::linear) co_return ops::concat_last<P>(hi, lo);
      RingTensor a = ring_filled({rows, d}, fp.encode(o_.alpha)), b = ring_filled({rows, d}, fp.encode(1 - o_.alpha));
      co_return co_await q.truncate(q.add(q.mul_public(hi, a), q.mul_public(lo, b)), q.frac_bits());
    };
    auto fine_task = [&](P& q) -> Task<Share> { co_return co_await mix(q, mx, mn, n); };
    auto coarse_task = [&](P& q) -> Task<std::optional<Share>> {
      if (!o_.hierarchical || c <= c0) co_return std::nullopt;  // the flat top-k needs no coarse level
      const std::size_t m = c - c0;
      // Coarse max/min of the new pairs: over the two children's max/min.
      auto pairs_max = P::apply(ops::rows<P>(*list.max_keys, 2 * c0, 2 * c), [=](const RingTensor& t) { return pair_columns(t, m, d); });
      auto pairs_min = P::apply(ops::rows<P>(*list.min_keys, 2 * c0, 2 * c), [=](const RingTensor& t) { return pair_columns(t, m, d); });
      auto both = ops::concat_last<P>(pairs_max, q.neg(pairs_min));  // (m * d, 2) | (m * d, 2)
      auto stacked = P::apply(both, [=](const RingTensor& t) {  // (2 m d, 2)
        RingTensor out = RingTensor::from_shape({2 * m * d, 2});
        for (std::size_t r = 0; r < m * d; ++r) {
          out(r, 0) = t(r, 0), out(r, 1) = t(r, 1);
          out(m * d + r, 0) = t(r, 2), out(m * d + r, 1) = t(r, 3);
        }
        return out;
      });
      auto best = co_await ops::max_last(q, stacked);  // (2 m d, 1)
      auto cmx = ops::reshape<P>(ops::rows<P>(best, 0, m * d), {m, d});
      auto cmn = ops::reshape<P>(q.neg(ops::rows<P>(best, m * d, 2 * m * d)), {m, d});
      co_return co_await mix(q, cmx, cmn, m);
    };
    auto [fine, coarse] = co_await when_all(fine_task(pf), coarse_task(pc));
    st.fine = st.fine ? ops::stack_rows<P>(*st.fine, fine) : fine;
    if (coarse) {
      st.coarse = st.coarse ? ops::stack_rows<P>(*st.coarse, *coarse) : *coarse;
      st.coarse_count = c;
    }
  }

  // (2c, d) -> (c * d, 2): the two children of coarse cluster i, dimension j.
  static RingTensor pair_columns(const RingTensor& t, std::size_t c, std::size_t d) {
    RingTensor out = RingTensor::from_shape({c * d, 2});
    for (std::size_t i = 0; i < c; ++i)
      for (std::size_t j = 0; j < d; ++j) {
        out(i * d + j, 0) = t(2 * i, j);
        out(i * d + j, 1) = t(2 * i + 1, j);
      }
    return out;
  }

  // The group's query heads (g, d) as one row to score summaries with:
  // linear: (1, d), their sum; bound: (1, 2d), [sum of q+ | sum of q-].
  Task<Share> query_row(P& p, const Share& queries) {
    auto scope = cost_scope(p, CostTag::similarity);
    const std::size_t d = P::shape(queries).at(1);
    auto head_sum = [d](const Share& x) {
      return ops::reshape<P>(P::apply(x, [](const RingTensor& t) { return ring_sum_second_last(t); }), {1, d});
    };
    if (o_.similarity != Similarity::bound) co_return head_sum(queries);
    auto q_minus = co_await ops::msb_times(p, queries, queries);  // [q < 0] q: the sign bit selects
    auto q_plus = p.sub(queries, q_minus);
    co_return ops::concat_last<P>(head_sum(q_plus), head_sum(q_minus));
  }

  // Scores of summaries (n, d or 2d) against a query row -> (n).
  Task<Share> similarity(P& p, const Share& query, const Share& summaries) {
    auto scope = cost_scope(p, CostTag::similarity);
    const std::size_t n = P::shape(summaries).at(0);
    if (o_.similarity == Similarity::elementwise) {  // summaries (n, 2d) = [max | min]
      const std::size_t d = P::shape(query).at(1);
      auto products = co_await p.mul_trunc(ops::tile_row<P>(ops::concat_last<P>(query, query), n), summaries);
      auto pairs = P::apply(products, [=](const RingTensor& t) {  // (n * d, 2): [q r_max, q r_min]
        RingTensor out = RingTensor::from_shape({n * d, 2});
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t i = 0; i < d; ++i) out(r * d + i, 0) = t(r, i), out(r * d + i, 1) = t(r, d + i);
        return out;
      });
      auto best = ops::reshape<P>(co_await ops::max_last(p, pairs), {n, d});
      co_return ops::reshape<P>(ops::sum_last<P>(best), {n});
    }
    auto sim = co_await p.matmul_trunc(query, ops::transpose<P>(summaries));
    co_return ops::reshape<P>(sim, {n});
  }

  // One-hot rows (k, n) of the k best of n scores.
  static Task<Share> top_onehot(P& p, const Share& scores, std::size_t k) {
    auto scope = cost_scope(p, CostTag::topk);
    co_return co_await ops::topk_onehot(p, scores, k);
  }

  // (k, n) -> (k, n + 1) with a zero first column (cluster 0 is never picked).
  static Share after_first(const P& p, const Share& x) {
    const std::size_t k = P::shape(x).at(0);
    return ops::concat_last<P>(ops::public_share(p, x, ring_zeros({k, 1})), x);
  }

  // Fine clusters among [1, f) (never cluster 0, always attended anyway): the one-hot
  // (k, f) of the picked ones and their gathered rows. Hierarchical: the
  // coarse top-k's one-hot rows expand locally into the candidates' one-hot
  // rows; one matmul gathers the candidates' summaries and rows together;
  // the fine top-k's one-hot rows then pick both the clusters' one-hot and
  // their rows in one more matmul. No index is ever one-hot encoded twice.
  Task<std::pair<Share, Selection<P>>> pick(P& p, State& st, const Share& query, std::size_t k, std::size_t f) {
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

  std::size_t budget_;
  MpCacheOptions o_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
