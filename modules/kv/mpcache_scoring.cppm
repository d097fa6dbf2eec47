// MPCache's cluster scoring (members of MpCache<P>, declared in :mpcache):
// the fine and coarse clusters' summaries from their per-dimension r_max and
// r_min (once per cluster), the query group's row, and the similarity of the
// summaries to it (linear, bound, or elementwise for the ablation).
export module mpcache.kv:mpcache_scoring;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :mpcache;

namespace mpcache::kv {

// Summaries of clusters [summarised, upto), only those: fine r_max / r_min
// once per cluster, when its last token arrives (at prefill for the
// prompt's clusters; during decode in prefetch, off the critical path),
// coarse ones once per pair.
template <Protocol P>
Task<void> MpCache<P>::summarise(P& p, State& st, std::size_t upto) {
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
template <Protocol P>
RingTensor MpCache<P>::pair_columns(const RingTensor& t, std::size_t c, std::size_t d) {
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
template <Protocol P>
auto MpCache<P>::query_row(P& p, const Share& queries) -> Task<Share> {
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
template <Protocol P>
auto MpCache<P>::similarity(P& p, const Share& query, const Share& summaries) -> Task<Share> {
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

}  // namespace mpcache::kv
