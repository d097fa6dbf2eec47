// Building blocks of token-wise selections shared by the baseline
// policies: the whole cache, public rows appended to a selection, and
// per-position scores that grow with the cache (accumulated attention).
// Everything secret stays secret: scores, indices and gathers use the
// Protocol ops (top-k, one-hot, matmul); only sizes and public positions
// (sinks, windows) are in the clear.
export module mpcache.kv:selection;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;

export namespace mpcache::kv {

namespace detail {

template <Protocol P>
Selection<P> whole_cache(const P& p, const StepView<P>& step) {
  Selection<P> s;
  const std::size_t t = step.position + 1;
  for (const auto& hc : *step.cache) {
    s.keys.push_back(hc.keys);
    s.values.push_back(hc.values);
    s.positions.push_back(public_range(p, hc.keys, 0, t));
  }
  return s;
}

// Public rows [begin, end) appended to a selection head.
template <Protocol P>
void append_rows(const P& p, const HeadCache<P>& hc, std::size_t begin, std::size_t end,
                 typename P::Share& keys, typename P::Share& values, typename P::Share& positions) {
  keys = ops::stack_rows<P>(keys, ops::rows<P>(hc.keys, begin, end));
  values = ops::stack_rows<P>(values, ops::rows<P>(hc.values, begin, end));
  positions = ops::concat_last<P>(positions, public_range(p, hc.keys, begin, end));
}

// Elements [begin, end) of a vector share.
template <Protocol P>
typename P::Share elements(const typename P::Share& v, std::size_t begin, std::size_t end) {
  return ops::slice_last<P>(v, begin, end);
}

// Sum over the group rows: (g, n) -> (n).
template <Protocol P>
typename P::Share sum_group(const typename P::Share& probs) {
  return P::apply(probs, [](const RingTensor& t) { return ring_sum_second_last(t); });
}

// Zero-pad a vector share to length n (new tokens start with score 0).
template <Protocol P>
typename P::Share pad_to(const P& p, const typename P::Share& v, std::size_t n) {
  const std::size_t have = P::shape(v).at(0);
  if (have >= n) return v;
  auto zeros = p.add_public(P::apply(v, [&](const RingTensor&) { return ring_zeros({n - have}); }),
                            ring_zeros({n - have}));
  return ops::concat_last<P>(v, zeros);
}

// score (T) += probs summed over the group, scattered to their positions.
template <Protocol P>
Task<typename P::Share> scatter_add(P& p, const typename P::Share& score,
                                    const typename P::Share& probs, const typename P::Share& positions) {
  const std::size_t t = P::shape(score).at(0), n = P::shape(positions).at(0);
  auto hot = co_await ops::one_hot(p, positions, t);  // (n, T)
  auto row = ops::reshape<P>(sum_group<P>(probs), {1, n});
  auto add = co_await p.matmul(row, hot);  // (1, T): 0/1 weights need no truncation
  co_return p.add(score, ops::reshape<P>(add, {t}));
}

}  // namespace detail

}  // namespace mpcache::kv
