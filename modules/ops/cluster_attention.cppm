// Attention over clusters that a secret one-hot picks, computed where the
// tokens lie instead of gathering them first.
//
// Gathering k picked clusters of s tokens moves every picked token's key
// and value (k s (2d + 1) elements per KV head, and k f s (2d + 1) local
// products). Here only scores and weights move:
//   1. the group's raw scores over the clustered rows (g, f s),
//      untruncated, and (concurrently) the tail's scores;
//   2. the first and picked clusters' scores, by one product with their
//      one-hot rows (first/s + k, f) x (f, g s), truncated in that product;
//   3. the softmax over the attended scores (first rows, picked, tail);
//   4. the weights scattered back by the transposed one-hot, then one
//      product with every value row.
// Steps 1 and 4 move g f s elements each, whatever k. Against a gather
// then softmax_times, step 2 adds one round; under exact truncation step
// 4's scatter runs while the softmax's reciprocal does (no round), under
// probabilistic truncation it adds one.
export module mpcache.ops:cluster_attention;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :softmax;

export namespace mpcache::ops {

// Which rows of a (L, d) token list a query group attends: rows [0, first),
// the clusters (`cluster` rows each, among clusters [0, f)) that one-hot
// rows (k, f) pick, and the tail, rows [f cluster, L). The one-hot must not
// pick a cluster inside [0, first).
struct ClusterSpan {
  std::size_t cluster = 16;
  std::size_t first = 0;
};

// Attended entries per query row: first + k s + (L - f s).
inline std::size_t attended_count(const ClusterSpan& span, std::size_t picked, std::size_t clusters,
                                  std::size_t length) {
  return span.first + picked * span.cluster + (length - clusters * span.cluster);
}

namespace detail {

// (g, L) -> (f, g s): row c holds cluster c's s columns of every query row.
inline RingTensor by_cluster(const RingTensor& t, std::size_t f, std::size_t s) {
  const std::size_t g = t.shape()[0], length = t.shape()[1];
  RingTensor out = RingTensor::from_shape({f, g * s});
  for (std::size_t c = 0; c < f; ++c)
    for (std::size_t h = 0; h < g; ++h)
      std::copy_n(t.data() + h * length + c * s, s, out.data() + c * g * s + h * s);
  return out;
}

// (f, g s) -> (g, f s), by_cluster's inverse.
inline RingTensor by_row(const RingTensor& t, std::size_t g, std::size_t s) {
  // (also (rows, g s) -> (g, rows s) for any row count)
  const std::size_t f = t.shape()[0];
  RingTensor out = RingTensor::from_shape({g, f * s});
  for (std::size_t c = 0; c < f; ++c)
    for (std::size_t h = 0; h < g; ++h)
      std::copy_n(t.data() + c * g * s + h * s, s, out.data() + h * f * s + c * s);
  return out;
}

}  // namespace detail

// {softmax(scores) V, softmax(scores)} for a query group (g, d) over the
// attended rows of keys and values (L, d), with one-hot rows hot (k, f).
// The weights' columns are [first rows | picked clusters, in hot's row
// order | tail], the order ops::cluster_gather would give them.
template <Protocol P>
Task<std::pair<typename P::Share, typename P::Share>> cluster_attention(P& p, const typename P::Share& queries,
                                                                        const typename P::Share& keys,
                                                                        const typename P::Share& values,
                                                                        const typename P::Share& hot,
                                                                        ClusterSpan span) {
  using Share = typename P::Share;
  const std::size_t g = P::shape(queries).at(0), length = P::shape(keys).at(0);
  const std::size_t k = P::shape(hot).at(0), f = P::shape(hot).at(1), s = span.cluster;
  if (s == 0 || f * s > length || span.first > f * s || span.first % s != 0 || P::shape(values).at(0) != length)
    throw Error(ErrorCode::invalid_argument,
                "cluster_attention: " + std::to_string(f) + " clusters of " + std::to_string(s) + " rows, first " +
                    std::to_string(span.first) + ", over keys " + shape_string(P::shape(keys)) + " and values " +
                    shape_string(P::shape(values)));
  const std::size_t lead = span.first / s, hot_rows = lead + k;  // one-hot rows: the first clusters, then the picked
  const std::size_t head = span.first + k * s, n = attended_count(span, k, f, length);
  RingTensor first_hot = ring_zeros({lead, f});
  for (std::size_t c = 0; c < lead; ++c) first_hot(c, c) = 1;
  const Share all_hot = stack_rows<P>(public_share(p, hot, first_hot), hot);  // (hot_rows, f)
  // 1-2: raw scores (scale 2^2f) of the clustered rows; the one-hot is an
  // integer matrix, so its product with them truncates once, to 2^f.
  auto clustered = [&](P& q) -> Task<Share> {
    auto raw = co_await q.matmul(queries, transpose<P>(rows<P>(keys, 0, f * s)));  // (g, f s)
    auto scope = cost_scope(q, CostTag::gather);
    co_return co_await q.matmul_trunc(all_hot, P::apply(raw, [=](const RingTensor& t) { return detail::by_cluster(t, f, s); }));
  };
  auto tail = [&](P& q) -> Task<Share> {
    co_return co_await q.matmul_trunc(queries, transpose<P>(rows<P>(keys, f * s, length)));  // (g, L - f s)
  };
  Share scores;
  if (length == f * s) {  // no tail
    scores = P::apply(co_await clustered(p), [=](const RingTensor& t) { return detail::by_row(t, g, s); });
  } else {
    P pc = p.fork(), pt = p.fork();
    auto [picked, tail_scores] = co_await when_all(clustered(pc), tail(pt));
    scores = concat_last<P>(P::apply(picked, [=](const RingTensor& t) { return detail::by_row(t, g, s); }),
                            tail_scores);  // (g, n)
  }
  // 3-4: the softmax, its weights scattered back to the rows they belong to.
  auto times_values = [&](P& q, const Share& weights) -> Task<Share> {
    auto by_cluster = P::apply(slice_last<P>(weights, 0, head), [=](const RingTensor& t) {
      return detail::by_cluster(t, hot_rows, s);  // (hot_rows, g s)
    });
    Share scattered;
    {
      auto scope = cost_scope(q, CostTag::gather);
      scattered = co_await q.matmul(transpose<P>(all_hot), by_cluster);  // (f, g s): 0/1, no truncation
    }
    auto per_row = P::apply(scattered, [=](const RingTensor& t) { return detail::by_row(t, g, s); });  // (g, f s)
    auto full = head == n ? per_row : concat_last<P>(per_row, slice_last<P>(weights, head, n));  // (g, L)
    co_return co_await q.matmul_trunc(full, values);
  };
  auto scope = cost_scope(p, CostTag::softmax);
  co_return co_await softmax_times_by(p, scores, times_values);
}

}  // namespace mpcache::ops
