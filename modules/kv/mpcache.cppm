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
//    layer's eviction and selection indices (no selection of its own); or
//    chosen pairs, a widened pick for the sharing layer, and a sharing layer
//    that ranks its own query among the owner's picks (share_pairs,
//    share_widen, share_rerank: the ablation in docs/policies.md).
// Under MPC every index stays secret; sizes follow from the public budget.
// This partition holds the options and the MpCache class (its state and
// the declarations of its members); they are defined by job in
// :mpcache_eviction (static eviction at prefill), :mpcache_selection (a
// decode step's pick, early ranking, prefetch) and :mpcache_scoring (the
// clusters' summaries and their similarity to the query).
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
  // Share of coarse clusters kept. The rank top-k's comparisons grow with
  // the square of its candidates: at 2,048 tokens and 10% (10 picks of 126
  // clusters) 0.25 instead of the paper's 0.5 halves the fine level's
  // candidates, 30 MB of top-k per token instead of 48.6, and keeps
  // passkey retrieval (docs/policies.md, Narrower coarse level).
  double coarse_ratio = 0.25;
  double alpha = 0.6;           // linear similarity only
  bool share_layers = false;
  // Layer index sharing by pairs {layer, owner} (owner < layer; an owner
  // shares with no one, a layer takes at most one owner's pick): when not
  // empty, it replaces share_layers' odd-layer rule, so that pairs can
  // follow the measured overlap of the layers' picks. A pair beyond the
  // model's layers shares nothing (a named policy runs on any model).
  std::vector<std::pair<std::size_t, std::size_t>> share_pairs;
  // Where a layer shares its pick, the owner ranks ceil(share_widen * k)
  // clusters (k the picked clusters of the budget): it attends its best k,
  // the sharing layer all of them (or, with share_rerank, its own best k
  // among them). 1: the owner's k, as the paper.
  double share_widen = 1.0;
  // The sharing layer ranks its own query against its own summaries, but
  // only among the owner's ceil(share_widen * k) clusters: a top-k of those
  // candidates instead of its own selection over every cluster.
  bool share_rerank = false;
  bool hierarchical = true;
  // The coarse level saves comparisons (bytes) but adds a top-k and two
  // matmuls to the critical path; with at most this many fine candidates,
  // or a single pick (an argmax: its tournament compares about as many
  // pairs as the coarse level), the flat top-k (exact, and fewer rounds) is
  // used instead. 0: always hierarchical (the paper).
  std::size_t flat_up_to = 64;
  Similarity similarity = Similarity::bound;
  // Rank ahead: a step's query picks the clusters for the next step, while
  // the rest of its layer runs, so that a decode step's selection adds no
  // rounds to its critical path (the first step after the prompt still
  // ranks for itself, after the norm). It speculates that consecutive queries want the
  // same clusters; the newest tokens are attended whatever it picks.
  // Passkey retrieval holds with it (docs/policies.md, Ranking ahead).
  bool rank_ahead = true;
  // Under speculation (rank ahead only): a step's later rows take the pick
  // its first row has from the step before, instead of ranking with the
  // row before's query (which is what a decode one token a step would do).
  // It takes the K later rankings off the step's critical path and their
  // bytes, and is not exact: the bench reports its agreement with per-row
  // picks (policy "mpcache-shared-step"; docs/protocols.md).
  bool step_shares_pick = false;

  // The paper's Algorithm 3 defaults: 50% static eviction, the linear
  // similarity, odd layers sharing (with our flat top-k up to 64 candidates).
  static MpCacheOptions paper() {
    MpCacheOptions o;
    o.rank_ahead = false;  // the paper ranks with the step's own query
    o.coarse_ratio = 0.5;
    o.keep_ratio = 0.5;
    o.share_layers = true;
    o.similarity = Similarity::linear;
    return o;
  }
  // Our defaults, with a speculative step's rows sharing its first pick.
  static MpCacheOptions shared_step() {
    MpCacheOptions o;
    o.step_shares_pick = true;
    return o;
  }
  // Our defaults with one layer sharing: layer 2 takes layer 1's pick. The
  // pair is the one whose picks overlap most on our Austen model (0.66 of
  // the picked clusters at 1,024 tokens, 10%; the fidelity preset's
  // pick_overlap rows); its last layer, the one that retrieves a passkey,
  // keeps its own (docs/policies.md, Layer index sharing). Other models
  // need pairs of their own.
  static MpCacheOptions shared_layers() {
    MpCacheOptions o;
    o.share_pairs = {{2, 1}};
    return o;
  }
  // Does `layer` take another layer's pick, and whose?
  std::optional<std::size_t> owner_of(std::size_t layer) const {
    if (!share_pairs.empty()) {
      for (const auto& [sharer, owner] : share_pairs)
        if (sharer == layer) return owner;
      return std::nullopt;
    }
    if (share_layers && layer >= 2 && layer % 2 == 1) return layer - 1;
    return std::nullopt;
  }
  // Does some layer take `layer`'s pick?
  bool is_owner(std::size_t layer) const {
    if (!share_pairs.empty())
      return std::any_of(share_pairs.begin(), share_pairs.end(), [&](const auto& pr) { return pr.second == layer; });
    return share_layers && layer >= 2 && layer % 2 == 0;
  }
};

template <Protocol P>
class MpCache {
 public:
  using Share = typename P::Share;
  explicit MpCache(std::size_t budget, MpCacheOptions o = {}) : budget_(budget), o_(std::move(o)) {
    if (budget_ < minimum_budget(o_))
      throw budget_below_minimum("MPCache", budget_, minimum_budget(o_),
                                 "is below three clusters of " + std::to_string(o_.cluster) +
                                     " (the first, the newest and one selected)");
    if (!(o_.share_widen >= 1.0))
      throw Error(ErrorCode::invalid_argument, "MPCache: share_widen must be at least 1");
    for (const auto& [sharer, owner] : o_.share_pairs) {
      if (owner >= sharer)
        throw Error(ErrorCode::invalid_argument, "MPCache: layer " + std::to_string(sharer) + " cannot share the pick of layer " +
                                                     std::to_string(owner) + ", which comes after it");
      if (o_.owner_of(owner))
        throw Error(ErrorCode::invalid_argument, "MPCache: layer " + std::to_string(owner) +
                                                     " shares a pick and cannot lend one");
      if (std::count_if(o_.share_pairs.begin(), o_.share_pairs.end(), [s = sharer](const auto& pr) { return pr.first == s; }) > 1)
        throw Error(ErrorCode::invalid_argument, "MPCache: layer " + std::to_string(sharer) + " shares two layers' picks");
    }
  }
  static std::size_t minimum_budget(const MpCacheOptions& options = {}) { return 3 * options.cluster; }
  std::string name() const { return "mpcache"; }
  const MpCacheOptions& options() const noexcept { return o_; }

  // Fine clusters picked per step (besides the first cluster and the tail).
  std::size_t picked_clusters() const { return (budget_ - 2 * o_.cluster) / o_.cluster; }
  // Fine clusters a layer ranks: more than it attends where it lends its
  // pick and share_widen > 1.
  std::size_t ranked_clusters(std::size_t layer) const {
    const std::size_t k = picked_clusters();
    if (!o_.is_owner(layer)) return k;
    return std::max(k, static_cast<std::size_t>(std::ceil(o_.share_widen * double(k) - 1e-9)));
  }

  void reset(std::size_t layers, std::size_t heads) {
    state_.assign(layers, std::vector<State>(heads));
    for (auto& l : state_)
      for (auto& s : l) s.list.size = o_.cluster;
  }

  // A sharing layer takes its owner's pick (share_layers: the layer before;
  // share_pairs: its pair's). With share_rerank it still scores its own
  // clusters, among the owner's.
  bool shares(std::size_t layer) const { return o_.owner_of(layer).has_value(); }
  bool ranks_own(std::size_t layer) const { return !shares(layer) || o_.share_rerank; }

  // Look-once static eviction, all KV heads at once: one batched top-k over
  // every head's accumulated attention, then (instead of a second sort into
  // position order) one comparison batch against each head's k-th key, whose
  // prefix sums give every kept token its slot: one one-hot, one matmul.
  // A sharing layer reuses the owning layer's compaction matrix. The
  // prompt's complete clusters are summarised here, not at the first step.
  Task<void> after_prefill(P& p, const PrefillView<P>& view);

  // Only static eviction reads the prompt's attention weights (a sharing
  // layer reuses its owner's choice).
  bool reads_prefill_attention(std::size_t layer, std::size_t t) const {
    return kept_tokens(t) < t && !shares(layer);
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
                           const std::vector<Share>& positions);

  // All KV heads at once (concurrent, so rounds do not grow with the head
  // count). The picked clusters are not gathered: each head's selection is
  // a ClusterPick over its own list, attended in place
  // (ops::cluster_attention). A sharing layer does no summary and no
  // selection: its pick is the owning layer's one-hot over its own list.
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    co_return co_await select_every_head(p, step.cache->size(), [&](P& q, std::size_t j) {
      return select_head(q, step, j);
    });
  }

  // Once layer - 1 has selected at `position`, the decoder runs this
  // concurrently with the rest of layer - 1: layer - 1 summarises the
  // cluster this token completed, so that no later step (an early rank
  // included) waits for that summary.
  Task<void> prefetch(P& p, std::size_t layer, std::size_t position);

  // Early ranking (kv::EarlyRanking): every similarity here is positively
  // homogeneous in the query, so the scaled queries rank clusters as q does.
  // A sharing layer has nothing to rank (unless it reranks the owner's).
  // Not when ranking ahead: the first step after the prompt then ranks for
  // itself after the norm, so that its streams are those of every later
  // step (a refill of truncation pairs plans a step from the last one's).
  bool ranks_early(std::size_t layer) const { return ranks_own(layer) && !o_.rank_ahead; }

  // Rank ahead (MpCacheOptions::rank_ahead): the decoder calls rank() with
  // this step's queries and the next position, concurrently with the rest
  // of the layer; the next step's select() takes that pick.
  bool ranks_ahead(std::size_t layer) const { return o_.rank_ahead && ranks_own(layer); }

  // Every KV head's pick for view.position, concurrently, before the current
  // token is in the lists: over the clusters whose tokens are all there.
  Task<void> rank(P& p, const RankView<P>& view);

  Task<void> observe(P&, const StepView<P>&, const std::vector<Share>&) { co_return; }

  // The cluster lists hold every token a step can attend (the kept prompt,
  // then each new token as it arrives), and select() reads the decoder's
  // cache only at the new token: the decoder need not keep the prompt a
  // second time (OwnsCache).
  bool owns_cache() const noexcept { return true; }

  // Bytes this policy holds besides the decoder's cache (the summary's
  // "policy" bytes): per layer and KV head, its cluster list (the kept
  // tokens: keys, values, positions, and their clusters' max and min),
  // the summaries, and what a step picked ahead.
  std::size_t resident_bytes() const {
    std::size_t bytes = 0;
    auto add = [&bytes](const std::optional<Share>& a) { bytes += a ? share_bytes<P>(*a) : 0; };
    for (const auto& layer : state_)
      for (const auto& st : layer) {
        add(st.list.keys), add(st.list.values), add(st.list.positions), add(st.list.max_keys), add(st.list.min_keys);
        add(st.compaction), add(st.fine), add(st.coarse), add(st.hot), add(st.last_ids), add(st.lent_ids);
        if (st.ranked) add(st.ranked->hot), add(st.ranked->ids);
      }
    return bytes;
  }

  // Secret fine-cluster ids picked for (layer, kv head) at the last step.
  const std::optional<Share>& last_ids(std::size_t layer, std::size_t head) const {
    return state_.at(layer).at(head).last_ids;
  }

 private:
  // A pick for the query at `position` among fine clusters [1, clusters);
  // no hot/ids when everything fitted.
  struct Ranked {
    std::size_t position = 0;
    std::size_t clusters = 0;
    std::optional<Share> hot;  // (k, clusters)
    std::optional<Share> ids;  // (k)
    std::size_t id = 0;          // which choice (choose() counts them)
    std::size_t owner_pick = 0;  // a reranking layer: the id of the owner's choice it ranked among
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
                                      // (an owner: its ranked_clusters rows, best first)
    std::optional<Share> lent_ids;    // an owner's ids of those rows
    std::optional<Share> last_ids;
    std::optional<Ranked> ranked;     // rank()'s pick, until select() at its position takes it
    std::size_t decided_at = std::size_t(-1);  // position of the last select()
    std::size_t picked_from = 0;      // its F (0: everything fitted, nothing picked)
    std::size_t hot_id = 0;           // the id of the choice in `hot`
  };

  // Defined in the partitions by job, all part of this class: static
  // eviction (mpcache_eviction.cppm),
  Task<void> after_eviction(P& p, std::size_t layer_index, std::size_t prompt_tokens);
  Task<std::vector<Share>> eviction(P& p, const PrefillView<P>& view, std::size_t keep, std::size_t window);
  Task<Share> compact(P& p, const Share& matrix, const HeadCache<P>& hc);
  // a decode step's selection (mpcache_selection.cppm),
  Task<Selection<P>> select_head(P& p, const StepView<P>& step, std::size_t j);
  Task<void> choose(P& p, State& st, const Share& queries, std::size_t position, std::size_t f, std::size_t k);
  Task<void> rerank(P& p, State& st, const Share* owner_hot, std::size_t owner_pick, const Share& queries,
                    std::size_t position, std::size_t f);
  static Share ids_of(P& p, const Share& hot, std::size_t f);
  Task<Selection<P>> select_shared(P& p, const StepView<P>& step, std::size_t j, std::size_t owner);
  static Task<Share> top_onehot(P& p, const Share& scores, std::size_t k);
  static Share after_first(const P& p, const Share& x);
  Task<Share> pick(P& p, State& st, const Share& query, std::size_t k, std::size_t f);
  // the clusters' summaries and their similarity to a query (mpcache_scoring.cppm).
  Task<void> summarise(P& p, State& st, std::size_t upto);
  static RingTensor pair_columns(const RingTensor& t, std::size_t c, std::size_t d);
  Task<Share> query_row(P& p, const Share& queries);
  Task<Share> similarity(P& p, const Share& query, const Share& summaries);

  std::size_t budget_;
  MpCacheOptions o_;
  std::vector<std::vector<State>> state_;
  std::size_t choices_ = 0;  // ids of choose()'s choices
};

}  // namespace mpcache::kv
