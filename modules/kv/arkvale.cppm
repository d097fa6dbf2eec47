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
// Pages leave the token list once they are complete and selection has begun:
// each party appends its shares of them to a page store (PageStore), and the
// step's pages are gathered from it by one one-hot over the candidate pages
// and one matmul streamed over the store's chunks (ops::matmul_sum). The sink
// pages and the tail stay aside. With the file tier (`tier`, the policy
// "arkvale-recall") this is ArkVale's eviction with recall: pages not picked
// wait in each party's backing file and come back whenever their digests
// rank high again. ArkVale recalls pages by id; page ids are secret here, so
// every step reads the whole file (the reads never depend on the choice),
// one chunk of pages at a time. The policy then keeps the cache itself
// (OwnsCache): resident are the digests, the sink pages, the tail and one
// chunk of pages (as many as the step picks) while a gather reads it.
export module mpcache.kv:arkvale;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :clusters;
import :page_store;

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
  PageTier tier = PageTier::memory;  // file: the backing tier, with recall
  std::filesystem::path dir;         // the file tier's folder (default: the temporary directory)
  std::size_t chunk_pages = 0;       // pages a gather reads at once (0: as many as a step picks)
};

template <Protocol P>
class ArkVale {
 public:
  using Share = typename P::Share;

  explicit ArkVale(std::size_t budget, ArkValeOptions options = {}) : budget_(budget), o_(options) {
    if (o_.page == 0) throw Error(ErrorCode::invalid_argument, "ArkVale: pages of zero tokens");
    if (budget_ < minimum_budget(o_))
      throw Error(ErrorCode::invalid_argument,
                  "ArkVale: budget " + std::to_string(budget_) + " is below " + std::to_string(o_.sink_pages) +
                      " sink page(s), the tail and one page of " + std::to_string(o_.page) +
                      " tokens: the minimum is " + std::to_string(minimum_budget(o_)));
  }
  static std::size_t minimum_budget(const ArkValeOptions& options = {}) {
    return (options.sink_pages + 2) * options.page;
  }
  std::string name() const { return o_.tier == PageTier::file ? "arkvale-recall" : "arkvale"; }
  const ArkValeOptions& options() const noexcept { return o_; }
  // Pages picked per step besides the sinks and the tail.
  std::size_t top_pages() const { return (budget_ - (o_.sink_pages + 1) * o_.page) / o_.page; }

  void reset(std::size_t layers, std::size_t heads) {
    const PageStoreOptions store{o_.tier, o_.dir, o_.chunk_pages ? o_.chunk_pages : std::max<std::size_t>(1, top_pages())};
    pages_.assign(layers, {});
    for (auto& layer : pages_) {
      layer.reserve(heads);
      for (std::size_t j = 0; j < heads; ++j) {
        layer.push_back(Pages{store});
        layer.back().list.size = o_.page;
      }
    }
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

  // OwnsCache, with the backing tier: the decoder then keeps only the rows
  // this policy has not yet taken.
  bool owns_cache() const noexcept { return o_.tier == PageTier::file; }
  std::size_t resident_bytes() const {
    std::size_t bytes = 0;
    auto add = [&bytes](const std::optional<Share>& a) { bytes += a ? share_bytes<P>(*a) : 0; };
    for (const auto& layer : pages_)
      for (const auto& h : layer) {
        add(h.list.keys), add(h.list.values), add(h.list.positions), add(h.list.max_keys), add(h.list.min_keys);
        add(h.digest);
        if (h.sink_rows)
          for (const auto* part : {&h.sink_rows->keys, &h.sink_rows->values, &h.sink_rows->positions})
            for (const auto& a : *part) bytes += share_bytes<P>(a);
        bytes += h.store.resident_bytes();
      }
    return bytes;
  }
  std::size_t backing_bytes() const {
    std::size_t bytes = 0;
    for (const auto& layer : pages_)
      for (const auto& h : layer) bytes += h.store.file_bytes();
    return bytes;
  }

 private:
  struct Pages {
    explicit Pages(const PageStoreOptions& o) : store(o) {}
    ClusterList<P> list;                 // tokens from page `stored` on; max/min keys of every page (cuboid_max)
    std::optional<Selection<P>> sink_rows;  // the sink pages' tokens, once pages are stored
    PageStore<P> store;                  // pages [sink_pages, stored)
    std::size_t stored = 0;              // pages [0, stored) have left the list
    std::optional<Share> digest;  // (F, 2d) [s (lo + hi) | sum |2k - lo - hi|], or (F, d) sum k
    std::size_t digested = 0;
  };

  Task<void> prefill_head(P& p, const PrefillView<P>& view, std::size_t j) {
    Pages& pages = pages_[view.layer][j];
    pages.list.append_rows(p, (*view.cache)[j], pages.list.length, view.tokens);
    auto scope = cost_scope(p, CostTag::summary);
    const std::size_t f = pages.list.complete();
    co_await summarise_upto(p, pages, f);
    if (f > o_.sink_pages + top_pages()) store_upto(pages, f);
  }

  Task<Selection<P>> select_head(P& p, const StepView<P>& step, std::size_t j) {
    Pages& pages = pages_[step.layer][j];
    ClusterList<P>& list = pages.list;
    const std::size_t t = step.position + 1;
    list.append_rows(p, (*step.cache)[j], list.length, t);
    const std::size_t f = list.complete(), sinks = std::min(o_.sink_pages, f), k = top_pages();
    if (f <= sinks + k) co_return list_rows(list, 0, t);  // nothing stored yet
    {
      auto scope = cost_scope(p, CostTag::summary);
      co_await summarise_upto(p, pages, f);
    }
    Share scores;
    {
      auto scope = cost_scope(p, CostTag::similarity);
      scores = co_await estimate(p, pages, (*step.queries)[j], f);  // (f)
    }
    ops::TopK<P> top;
    {
      auto scope = cost_scope(p, CostTag::topk);
      top = co_await ops::topk(p, ops::slice_last<P>(scores, sinks, f), k);
    }
    // Candidates are pages [sinks, f): the store's pages, in order.
    auto hot = co_await ops::one_hot(p, top.indices, f - sinks);  // (k, f - sinks)
    store_upto(pages, f);
    Selection<P> picked = co_await gather_stored(p, pages.store, hot);
    Selection<P> sel = pages.sink_rows ? *pages.sink_rows : std::move(picked);
    if (pages.sink_rows) append_selection(sel, std::move(picked));
    append_list_rows(list, list.tail_begin(), list.length, sel);
    co_return sel;
  }

  // Pages [stored, f) move from the list to the store (the sink pages, the
  // first time, aside).
  void store_upto(Pages& pages, std::size_t f) {
    ClusterList<P>& list = pages.list;
    const std::size_t s = o_.page;
    if (pages.stored == 0) {
      if (o_.sink_pages > 0) pages.sink_rows = list_rows(list, 0, o_.sink_pages * s);
      pages.stored = o_.sink_pages;
    }
    if (f <= pages.stored) return;
    auto moving = list_rows(list, pages.stored * s, f * s);
    auto blocks = token_blocks<P>(moving.keys[0], moving.values[0], moving.positions[0], s);  // (n, s, 2d + 1)
    const Shape b = P::shape(blocks);
    pages.store.append(ops::reshape<P>(blocks, {b[0], b[1] * b[2]}));
    list.drop_before(f * s);
    pages.stored = f;
  }

  // The store's pages picked by one-hot rows (k, pages): one matmul whose
  // terms are the store's chunks, read one at a time.
  Task<Selection<P>> gather_stored(P& p, const PageStore<P>& store, const Share& hot) const {
    auto term = [&store, &hot](std::size_t c) {
      const auto [first, last] = store.chunk_pages(c);
      return std::pair<Share, Share>{ops::slice_last<P>(hot, first, last), store.load(c)};
    };
    auto picked = co_await ops::matmul_sum(p, store.chunks(), term);  // (k, s (2d + 1))
    const Shape shape = P::shape(picked);
    co_return unpack_tokens<P>(ops::reshape<P>(picked, {shape[0] * o_.page, shape[1] / o_.page}));
  }

  // Each of pages [0, f)'s estimate for the group's queries q (g, d),
  // times 2s (cuboid_mean) or s (centroid): (f).
  Task<Share> estimate(P& p, Pages& pages, const Share& q, std::size_t f) {
    const ClusterList<P>& list = pages.list;
    if (o_.estimate == PageEstimate::cuboid_max)
      co_return co_await cuboid_bound(p, q, ops::rows<P>(*list.max_keys, 0, f), ops::rows<P>(*list.min_keys, 0, f));
    Share lhs = ops::sum_rows<P>(q);  // (1, d)
    if (o_.estimate == PageEstimate::cuboid_mean) lhs = ops::concat_last<P>(lhs, ops::sum_rows<P>(co_await ops::absolute(p, q)));
    auto s = co_await p.matmul_trunc(lhs, ops::transpose<P>(ops::rows<P>(*pages.digest, 0, f)));  // (1, f)
    co_return ops::reshape<P>(s, {f});
  }

  // Summaries of pages [digested, f): max and min keys (cuboid_max), or
  // the digest.
  Task<void> summarise_upto(P& p, Pages& pages, std::size_t f) {
    ClusterList<P>& list = pages.list;
    if (o_.estimate == PageEstimate::cuboid_max) co_return co_await list.summarise_upto(p, f);
    if (f <= pages.digested) co_return;
    const std::size_t first = pages.digested, s = o_.page;
    auto keys = list.key_rows(first * s, f * s);  // ((f - first) s, d)
    Share digest;
    if (o_.estimate == PageEstimate::centroid) {
      digest = ops::sum_row_runs<P>(keys, s);
    } else {
      co_await list.summarise_upto(p, f);
      auto box = p.add(ops::rows<P>(*list.max_keys, first, f), ops::rows<P>(*list.min_keys, first, f));  // lo + hi
      auto off_centre = p.sub(p.add(keys, keys), ops::repeat_rows<P>(box, s));                   // 2k - lo - hi
      auto spread = ops::sum_row_runs<P>(co_await ops::absolute(p, off_centre), s);
      digest = ops::concat_last<P>(ops::times_count(p, box, s), spread);
    }
    pages.digest = pages.digest ? ops::stack_rows<P>(*pages.digest, digest) : digest;
    pages.digested = f;
  }

  std::size_t budget_;
  ArkValeOptions o_;
  std::vector<std::vector<Pages>> pages_;  // [layer][kv head]
};

}  // namespace mpcache::kv
