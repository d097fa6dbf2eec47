// ArkVale (Chen et al. 2024, ../shared/seeds/arkvale-slides.txt): the cache
// cut into pages of `page` tokens (16 or 32), each summarised once, when it
// is complete (the prompt's with the prefill), by a digest; per step the pages whose digests estimate the
// highest importance for the step's queries are attended whole, with the
// first `sink_pages` pages and the newest tokens (the tail, which holds the
// current token). The importance of a page for q is max over its keys of
// q . k; the estimates (PageEstimate):
//   cuboid_mean  ArkVale's best: q . m + |q| . a, m the centre of the keys'
//                bounding box, a_i = mean over the page of |k_i - m_i|. Per
//                step: |q| (group x d comparisons) and one matmul; per page,
//                once: its max and min, and |2k - lo - hi| (s x d comparisons)
//   cuboid_max   the bounding box's bound sum_i max(q_i lo_i, q_i hi_i)
//                (Quest's): pages x d comparisons per query head and step
//   centroid     q . mean(k), the slides' baseline: no comparison at all
// The group's query heads share one choice of pages: their estimates are
// summed (q and |q| summed first, since the rest is linear). Pages are
// scored up to a common positive factor (2s), which leaves their order alone
// and keeps every digest an exact sum of shares. The KV heads select
// concurrently, each on its own stream.
//
// Page ids stay secret, so the gather reads every page (one one-hot over the
// pages and one matmul, as Quest and MPCache). ArkVale's eviction with recall
// (pages not picked move to CPU memory and come back when their digest ranks
// high again) moves pages by their ids: under MPC that would reveal which
// pages the query attends to. Here every page stays resident; an oblivious
// backing tier is not implemented (see the README, "ArkVale under MPC").
module;
#include "prelude.hpp"
export module mpcache.kv:arkvale;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :clusters;

export namespace mpcache::kv {

enum class PageEstimate { cuboid_mean, cuboid_max, centroid };

inline const char* page_estimate_name(PageEstimate e) {
  switch (e) {
    case PageEstimate::cuboid_mean: return "cuboid-mean";
    case PageEstimate::cuboid_max: return "cuboid-max";
    case PageEstimate::centroid: return "centroid";
  }
  return "?";
}

struct ArkValeOptions {
  std::size_t page = 16;        // tokens per page (ArkVale: 16 or 32)
  std::size_t sink_pages = 1;   // the first pages, always attended
  PageEstimate estimate = PageEstimate::cuboid_mean;
};

// x * n for a public count n, by doubling and adding: exact on every
// backend (a public integer factor is not a fixed-point one).
template <Protocol P>
typename P::Share times_count(const P& p, const typename P::Share& x, std::size_t n) {
  std::optional<typename P::Share> sum;
  typename P::Share power = x;
  for (; n > 0; n >>= 1) {
    if (n & 1) sum = sum ? p.add(*sum, power) : power;
    if (n > 1) power = p.add(power, power);
  }
  return sum ? *sum : p.sub(x, x);
}

// (n * s, d) -> (n, d): each run of s rows summed.
template <Protocol P>
typename P::Share sum_row_runs(const typename P::Share& a, std::size_t s) {
  return P::apply(a, [s](const RingTensor& t) {
    const std::size_t n = t.shape()[0] / s, d = t.shape()[1];
    RingTensor out = ring_zeros({n, d});
    for (std::size_t r = 0; r < n * s; ++r)
      for (std::size_t i = 0; i < d; ++i) out(r / s, i) += t(r, i);
    return out;
  });
}

// (g, d) -> (1, d): the group's rows summed.
template <Protocol P>
typename P::Share sum_rows(const typename P::Share& a) {
  return P::apply(a, [](const RingTensor& t) {
    const std::size_t d = t.shape()[1];
    return ring_reshape(ring_sum_second_last(t), {1, d});
  });
}

// |x| = x - 2 [x < 0] x.
template <Protocol P>
Task<typename P::Share> absolute(P& p, const typename P::Share& x) {
  auto negative_part = co_await ops::msb_times(p, x, x);
  co_return p.sub(x, p.add(negative_part, negative_part));
}

template <Protocol P>
class ArkVale {
 public:
  using Share = typename P::Share;

  explicit ArkVale(std::size_t budget, ArkValeOptions options = {}) : budget_(budget), o_(options) {
    if (o_.page == 0) throw Error(ErrorCode::invalid_argument, "ArkVale: pages of zero tokens");
    if (budget_ < (o_.sink_pages + 2) * o_.page)
      throw Error(ErrorCode::invalid_argument,
                  "ArkVale: budget " + std::to_string(budget_) + " is below " + std::to_string(o_.sink_pages) +
                      " sink page(s), the tail and one page of " + std::to_string(o_.page) + " tokens");
  }
  std::string name() const { return "arkvale"; }
  const ArkValeOptions& options() const noexcept { return o_; }
  // Pages picked per step besides the sinks and the tail.
  std::size_t top_pages() const { return (budget_ - (o_.sink_pages + 1) * o_.page) / o_.page; }

  void reset(std::size_t layers, std::size_t heads) {
    pages_.assign(layers, std::vector<Pages>(heads));
    for (auto& layer : pages_)
      for (auto& head : layer) head.list.size = o_.page;
  }
  // The prompt's complete pages are digested with the prefill, each KV head
  // on its own stream, so that a decode step digests only the page it
  // completes. (A cache started without a prefill is digested by the first
  // step instead.)
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    if (!view.cache) co_return;
    const std::size_t heads = view.cache->size();
    std::vector<P> forks;
    forks.reserve(heads);
    std::vector<Task<void>> tasks;
    for (std::size_t j = 0; j < heads; ++j) {
      forks.push_back(p.fork());
      tasks.push_back(prefill_head(forks.back(), view, j));
    }
    co_await when_all(std::move(tasks));
  }

  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    return select_every_head(p, step.cache->size(),
                             [this, &step](P& fork, std::size_t j) { return select_head(fork, step, j); });
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<Share>&) { co_return; }

 private:
  struct Pages {
    ClusterList<P> list;          // tokens, and max/min keys for cuboid_max
    std::optional<Share> digest;  // (F, 2d) [s (lo + hi) | sum |2k - lo - hi|], or (F, d) sum k
    std::size_t digested = 0;
  };

  Task<void> prefill_head(P& p, const PrefillView<P>& view, std::size_t j) {
    Pages& pages = pages_[view.layer][j];
    pages.list.append_rows(p, (*view.cache)[j], pages.list.length, view.tokens);
    auto scope = cost_scope(p, CostTag::summary);
    co_await summarise_upto(p, pages, pages.list.complete());
  }

  Task<Selection<P>> select_head(P& p, const StepView<P>& step, std::size_t j) {
    Pages& pages = pages_[step.layer][j];
    ClusterList<P>& list = pages.list;
    const std::size_t t = step.position + 1;
    list.append_rows(p, (*step.cache)[j], list.length, t);
    const std::size_t f = list.complete(), sinks = std::min(o_.sink_pages, f), k = top_pages();
    if (f <= sinks + k) co_return list_rows(list, 0, t);
    {
      auto scope = cost_scope(p, CostTag::summary);
      co_await summarise_upto(p, pages, f);
    }
    Share scores;
    {
      auto scope = cost_scope(p, CostTag::similarity);
      scores = co_await estimate(p, pages, (*step.queries)[j], f);  // (f)
    }
    auto scope = cost_scope(p, CostTag::topk);
    auto top = co_await ops::topk(p, ops::slice_last<P>(scores, sinks, f), k);
    // Candidates are pages [sinks, f): shift the ids to pages of the list.
    RingTensor shift = RingTensor::from_shape({k});
    for (auto& v : shift) v = sinks;
    auto hot = co_await ops::one_hot(p, p.add_public(top.indices, shift), f);  // (k, f)
    Selection<P> picked = co_await list.gather_hot(p, hot);
    Selection<P> sel = sinks > 0 ? list_rows(list, 0, sinks * o_.page) : std::move(picked);
    if (sinks > 0) append_selection(sel, std::move(picked));
    append_list_rows(list, list.tail_begin(), list.length, sel);
    co_return sel;
  }

  // Each of pages [0, f)'s estimate for the group's queries q (g, d),
  // times 2s (cuboid_mean) or s (centroid): (f).
  Task<Share> estimate(P& p, Pages& pages, const Share& q, std::size_t f) {
    const ClusterList<P>& list = pages.list;
    if (o_.estimate == PageEstimate::cuboid_max)
      co_return co_await cuboid_bound(p, q, rows<P>(*list.max_keys, 0, f), rows<P>(*list.min_keys, 0, f));
    Share lhs = sum_rows<P>(q);  // (1, d)
    if (o_.estimate == PageEstimate::cuboid_mean) lhs = ops::concat_last<P>(lhs, sum_rows<P>(co_await absolute(p, q)));
    auto s = co_await p.matmul_trunc(lhs, transpose<P>(rows<P>(*pages.digest, 0, f)));  // (1, f)
    co_return ops::reshape<P>(s, {f});
  }

  // Summaries of pages [digested, f): max and min keys (cuboid_max), or
  // the digest.
  Task<void> summarise_upto(P& p, Pages& pages, std::size_t f) {
    ClusterList<P>& list = pages.list;
    if (o_.estimate == PageEstimate::cuboid_max) co_return co_await list.summarise_upto(p, f);
    if (f <= pages.digested) co_return;
    const std::size_t first = pages.digested, s = o_.page;
    auto keys = rows<P>(*list.keys, first * s, f * s);  // ((f - first) s, d)
    Share digest;
    if (o_.estimate == PageEstimate::centroid) {
      digest = sum_row_runs<P>(keys, s);
    } else {
      co_await list.summarise_upto(p, f);
      auto box = p.add(rows<P>(*list.max_keys, first, f), rows<P>(*list.min_keys, first, f));  // lo + hi
      auto off_centre = p.sub(p.add(keys, keys), repeat_rows<P>(box, s));                   // 2k - lo - hi
      auto spread = sum_row_runs<P>(co_await absolute(p, off_centre), s);
      digest = ops::concat_last<P>(times_count(p, box, s), spread);
    }
    pages.digest = pages.digest ? stack_rows<P>(*pages.digest, digest) : digest;
    pages.digested = f;
  }

  std::size_t budget_;
  ArkValeOptions o_;
  std::vector<std::vector<Pages>> pages_;  // [layer][kv head]
};

}  // namespace mpcache::kv
