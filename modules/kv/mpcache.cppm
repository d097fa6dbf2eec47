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
module;
#include "prelude.hpp"
export module mpcache.kv:mpcache;
import mpcache.core;
import mpcache.async;
import mpcache.net;
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
enum class Similarity { linear, bound };

struct MpCacheOptions {
  double keep_ratio = 0.5;      // static eviction keeps this share of the prompt
  double window_ratio = 0.2;    // queries used for static eviction
  std::size_t cluster = 16;     // fine cluster size (coarse = 2x)
  double coarse_ratio = 0.5;    // share of coarse clusters kept
  double alpha = 0.6;
  bool share_layers = true;
  bool hierarchical = true;
  Similarity similarity = Similarity::linear;
};

template <Protocol P>
class MpCache {
 public:
  using Share = typename P::Share;
  explicit MpCache(std::size_t budget, MpCacheOptions o = {}) : budget_(budget), o_(o) {
    if (budget_ < 3 * o_.cluster)
      throw Error(ErrorCode::invalid_argument, "MPCache: budget below three clusters");
  }
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

  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    const std::size_t t = view.tokens;
    const std::size_t keep = std::min(t, std::max(budget_, static_cast<std::size_t>(std::llround(o_.keep_ratio * double(t)))));
    const std::size_t window = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(o_.window_ratio * double(t))));
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j) {
      State& st = state_[view.layer][j];
      const auto& hc = (*view.cache)[j];
      if (keep == t) {
        st.list.append_rows(p, hc, 0, t);
      } else {
        Share kept;
        if (shares_previous(view.layer)) {
          kept = *state_[view.layer - 1][j].kept;
        } else {
          auto score = accumulated_attention<P>((*view.probs)[j], view.group, t, t - window);
          auto top = co_await ops::topk(p, score, keep);
          // Position order, so clusters hold adjacent tokens: sort the
          // indices ascending (top-k of their negation).
          auto sorted = co_await ops::topk(p, p.neg(top.indices), keep);
          kept = p.neg(sorted.values);
        }
        Selection<P> one;
        co_await select_indices(p, hc, kept, one);
        st.list.append(p, one.keys[0], one.values[0], one.positions[0]);
        st.kept = std::move(kept);
      }
      st.prompt_tokens = t;
    }
  }

  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      State& st = state_[step.layer][j];
      auto& list = st.list;
      const std::size_t appended = list.length - (st.kept ? P::shape(*st.kept).at(0) : st.prompt_tokens);
      list.append_rows(p, (*step.cache)[j], st.prompt_tokens + appended, t);
      const std::size_t f = list.complete(), k = picked_clusters();
      if (f <= k + 1) {  // everything fits the budget
        push_head(s, list_rows(list, 0, list.length));
        continue;
      }
      co_await summarise(p, st);
      Share ids;
      if (shares_previous(step.layer)) {
        ids = *state_[step.layer - 1][j].last_ids;
      } else {
        ids = co_await pick(p, st, (*step.queries)[j], k);
      }
      st.last_ids = ids;
      Selection<P> one = list_rows(list, 0, list.size);  // the first cluster
      append_selection(one, co_await list.gather(p, ids));
      append_list_rows(list, list.tail_begin(), list.length, one);
      push_head(s, std::move(one));
    }
    co_return s;
  }

  Task<void> observe(P&, const StepView<P>&, const std::vector<Share>&) { co_return; }

  // Secret fine-cluster ids picked for (layer, kv head) at the last step.
  const std::optional<Share>& last_ids(std::size_t layer, std::size_t head) const {
    return state_.at(layer).at(head).last_ids;
  }

 private:
  struct State {
    ClusterList<P> list;
    std::optional<Share> kept;        // static eviction survivors (positions)
    std::size_t prompt_tokens = 0;
    std::optional<Share> fine;        // (F, d): alpha*max + (1-alpha)*min; bound: (F, 2d) [max | min]
    std::optional<Share> coarse;      // (F/2, d or 2d) over pairs of fine clusters
    std::optional<Share> last_ids;
  };

  Task<void> summarise(P& p, State& st) {
    auto& list = st.list;
    const std::size_t before = list.summarised;
    co_await list.summarise(p);
    const std::size_t f = list.summarised;
    if (f == before) co_return;
    const FixedPoint fp(p.frac_bits());
    const std::size_t d = P::shape(*list.max_keys).at(1);
    // Recompute the linear summaries (local: public alpha times shares).
    auto mx = *list.max_keys, mn = *list.min_keys;
    if (o_.similarity == Similarity::bound) {
      st.fine = ops::concat_last<P>(mx, mn);
    } else {
      RingTensor a = ring_filled({f, d}, fp.encode(o_.alpha)), b = ring_filled({f, d}, fp.encode(1 - o_.alpha));
      st.fine = co_await p.truncate(p.add(p.mul_public(mx, a), p.mul_public(mn, b)), p.frac_bits());
    }
    const std::size_t c = f / 2;
    if (c == 0) co_return;
    // Coarse max/min: over the two children's max/min.
    auto pairs_max = P::apply(rows<P>(mx, 0, 2 * c), [=](const RingTensor& t) { return pair_columns(t, c, d); });
    auto pairs_min = P::apply(rows<P>(mn, 0, 2 * c), [=](const RingTensor& t) { return pair_columns(t, c, d); });
    P p1 = p.fork(), p2 = p.fork();
    auto [cmax, neg_cmin] = co_await when_all(ops::max_last(p1, pairs_max), ops::max_last(p2, p.neg(pairs_min)));
    auto cmx = ops::reshape<P>(cmax, {c, d}), cmn = ops::reshape<P>(p.neg(neg_cmin), {c, d});
    if (o_.similarity == Similarity::bound) {
      st.coarse = ops::concat_last<P>(cmx, cmn);
      co_return;
    }
    RingTensor ca = ring_filled({c, d}, fp.encode(o_.alpha)), cb = ring_filled({c, d}, fp.encode(1 - o_.alpha));
    st.coarse = co_await p.truncate(p.add(p.mul_public(cmx, ca), p.mul_public(cmn, cb)), p.frac_bits());
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
    const std::size_t d = P::shape(queries).at(1);
    auto head_sum = [d](const Share& x) {
      return ops::reshape<P>(P::apply(x, [](const RingTensor& t) { return ring_sum_second_last(t); }), {1, d});
    };
    if (o_.similarity == Similarity::linear) co_return head_sum(queries);
    auto negative = co_await ops::msb(p, queries);             // 1 where q < 0
    auto q_minus = co_await p.mul(negative, queries);          // bit x fixed: no truncation
    auto q_plus = p.sub(queries, q_minus);
    co_return ops::concat_last<P>(head_sum(q_plus), head_sum(q_minus));
  }

  // Scores of summaries (n, d or 2d) against a query row -> (n).
  Task<Share> similarity(P& p, const Share& query, const Share& summaries) {
    auto sim = co_await p.matmul_trunc(query, transpose<P>(summaries));
    co_return ops::reshape<P>(sim, {P::shape(summaries).at(0)});
  }

  // Fine-cluster ids (k), never cluster 0 (always attended anyway).
  Task<Share> pick(P& p, State& st, const Share& queries, std::size_t k) {
    const std::size_t f = st.list.complete(), c = f / 2;
    const Share query = co_await query_row(p, queries);
    if (!o_.hierarchical || c < 2) {
      auto sim = co_await similarity(p, query, rows<P>(*st.fine, 1, f));
      auto top = co_await ops::topk(p, sim, k);
      co_return p.add_public(top.indices, ring_filled({k}, 1));
    }
    // Coarse level over coarse clusters 1..c-1 (coarse 0 holds the first cluster).
    const std::size_t candidates_coarse = c - 1;
    const std::size_t kc = std::min(candidates_coarse,
                                    std::max<std::size_t>((k + 1) / 2, static_cast<std::size_t>(std::ceil(o_.coarse_ratio * double(candidates_coarse)))));
    auto csim = co_await similarity(p, query, rows<P>(*st.coarse, 1, c));
    auto ctop = co_await ops::topk(p, csim, kc);
    auto coarse_ids = p.add_public(ctop.indices, ring_filled({kc}, 1));
    // Children 2c and 2c+1 (local arithmetic on the secret ids), plus the
    // public fine cluster 1 and, if f is odd, the unpaired last one.
    auto twice = p.add(coarse_ids, coarse_ids);
    auto cand = ops::concat_last<P>(twice, p.add_public(twice, ring_filled({kc}, 1)));
    std::vector<std::size_t> extra{1};
    if (f % 2 == 1) extra.push_back(f - 1);
    cand = ops::concat_last<P>(cand, public_integers(p, cand, extra));
    auto cand_summaries = co_await gather_rows(p, *st.fine, cand);
    auto fsim = co_await similarity(p, query, cand_summaries);
    const std::size_t kk = std::min(k, P::shape(cand).at(0));
    auto ftop = co_await ops::topk(p, fsim, kk);
    auto ids = co_await gather_values(p, cand, ftop.indices);
    if (kk < k) {  // not enough candidates: fill from the flat ranking (rare, tiny caches)
      throw Error(ErrorCode::invalid_argument, "MPCache: coarse level left too few clusters");
    }
    co_return ids;
  }

  std::size_t budget_;
  MpCacheOptions o_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
