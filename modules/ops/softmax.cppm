// softmax along the last axis: subtract an upper bound of the row max
// within 3/16 (a group tournament on the scores read to 1/16, see
// max_upper_last in reduce.cppm), exp_neg, optional public 0/1 mask (masked
// entries get weight 0), sum, reciprocal of the sum (in [exp(-3/16), n]),
// one product. Rows must have at least one unmasked entry, and the max of
// a row must be unmasked (a causal mask's public bias keeps it so).
//   the reciprocal's highest-bit search covers only sums below 2n
//   error: <= 4e-3 absolute per entry for n <= 1024 (tested against float64)
//   cost (rss3): max (max_upper_last: tournament_levels on 50 bits) +
//     exp (exp.cppm) + reciprocal (reciprocal.cppm, sums below 2^11) + 1;
//     with rss3 dcf's arithmetic one-hot the product with the numerators
//     ends with the reciprocal instead (reciprocal_then): no + 1.
//     softmax_times (below) adds no round for its product with v where
//     truncation is exact
export module mpcache.ops:softmax;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :reduce;
import :exp;
import :reciprocal;
import :compare;

export namespace mpcache::ops {

// The shift of softmax's row max: it reads the scores to 1/16
// (max_upper_last, as exp's clip reads them), so the largest numerator is at
// least exp(-3/16). At f = 18 its comparisons take 50 bits: on rss3's
// circuit the rounds of 64 (6) and 12.3 bytes where 64 take 15.6 (fewer
// bits take a round less only below 50, by wider groups that cost more
// bytes than 64 bits do).
inline int softmax_max_drop(int frac_bits) { return std::max(0, frac_bits - 4); }

namespace detail {
// exp(x - m), m an upper bound of max(x) within 3/16, masked: the numerators
// of softmax.
// (x by value: dropped once shifted, so a prefill holds one tensor of its
// scores less through exp.)
template <Protocol P>
Task<typename P::Share> softmax_numerators(P& p, typename P::Share x, const std::optional<RingTensor>& mask,
                                           std::size_t plan_rows = 0) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.back();
  if (mask && shape_of(*mask) != shape)
    throw Error(ErrorCode::invalid_argument, "softmax mask has shape " +
                                                 shape_string(shape_of(*mask)) + ", scores " +
                                                 shape_string(shape));
  // An upper bound of the row max within 3/16 (softmax_max_drop): its
  // comparisons take 50 bits, not 64.
  auto row_max = co_await max_upper_last(p, x, softmax_max_drop(p.frac_bits()), plan_rows);  // (..., 1)
  auto shifted = p.sub(std::exchange(x, typename P::Share{}), broadcast_last<P>(row_max, n));
  auto e = co_await exp_neg(p, shifted);
  shifted = typename P::Share{};
  if (mask) e = p.mul_public(e, *mask);  // integer 0/1: no truncation
  co_return e;
}

// m_i / sum of the numerators e (..., n) for what make(q) returns
// (reciprocal_then): the sum lies in [exp(-3/16), n] up to exp's error
// (the max's own term is at least exp(-3/16)), so below 2n.
template <Protocol P, class Make>
Task<std::vector<typename P::Share>> over_sum(P& p, const typename P::Share& e, Make make) {
  const std::size_t n = P::shape(e).back();
  co_return co_await reciprocal_then(p, sum_last<P>(e), make, ceil_log2(2 * n));
}
}  // namespace detail

// plan_rows: as argmax_last's (reduce.cppm), for callers that run several
// softmaxes at once.
template <Protocol P>
Task<typename P::Share> softmax_last(P& p, const typename P::Share& x,
                                     const std::optional<RingTensor>& mask = std::nullopt, std::size_t plan_rows = 0) {
  using Share = typename P::Share;
  auto e = co_await detail::softmax_numerators(p, x, mask, plan_rows);
  // (over_sum has summed e before it asks for the multiplicands: e moves.)
  auto numerators = [&e](P&) -> Task<std::vector<Share>> { co_return std::vector<Share>{std::move(e)}; };
  co_return std::move((co_await detail::over_sum(p, e, numerators)).front());
}

// {softmax(x) v, softmax(x)} for x (..., n) and v (n, d). Where truncation
// is exact (truncates_exactly) e v runs while the reciprocal of the sum is
// computed, and both products with it end with the reciprocal (one round
// less than softmax then its product with v). The unnormalised sum of n products
// reaches n |v| 2^(2f) before its truncation; under probabilistic
// truncation its failure probability grows with it (at n = 512 a few
// elements per prefill failed and garbled whole generations), so there the
// product follows the softmax. softmax_times_by takes the product as
// times(p, w) -> w v for weights w (..., n): cluster_attention's scatter
// then product. plan_rows: as argmax_last's (reduce.cppm).
template <Protocol P, class Times>
Task<std::pair<typename P::Share, typename P::Share>> softmax_times_by(P& p, const typename P::Share& x, Times times,
                                                                       const std::optional<RingTensor>& mask = std::nullopt,
                                                                       std::size_t plan_rows = 0) {
  if (!truncates_exactly(p)) {
    auto probs = co_await softmax_last(p, x, mask, plan_rows);
    auto out = co_await times(p, probs);
    co_return std::pair{std::move(out), std::move(probs)};
  }
  using Share = typename P::Share;
  auto e = co_await detail::softmax_numerators(p, x, mask, plan_rows);
  auto times_and_itself = [&](P& q) -> Task<std::vector<Share>> {
    auto ev = co_await times(q, e);
    co_return std::vector<Share>{std::move(ev), std::move(e)};  // e summed already (over_sum)
  };
  auto out = co_await detail::over_sum(p, e, times_and_itself);
  co_return std::pair{std::move(out[0]), std::move(out[1])};
}

template <Protocol P>
Task<std::pair<typename P::Share, typename P::Share>> softmax_times(P& p, const typename P::Share& x,
                                                                    const typename P::Share& v,
                                                                    const std::optional<RingTensor>& mask = std::nullopt,
                                                                    std::size_t plan_rows = 0) {
  co_return co_await softmax_times_by(
      p, x, [&v](P& q, const typename P::Share& w) { return q.matmul_trunc(w, v); }, mask, plan_rows);
}

// softmax(x) v alone, for x (..., n) and v (n, d), where nobody reads the
// weights (a prefill whose policy does not look at them): e v runs while
// the reciprocal of the row sums is computed, and the normalisation is a
// product per output (..., d), not per weight (..., n). Where truncation
// is probabilistic, softmax then its product (as softmax_times).
//   error: within softmax's per-entry bound times sum_j |v_j| (tested)
template <Protocol P>
Task<typename P::Share> softmax_apply(P& p, typename P::Share x, const typename P::Share& v,
                                      const std::optional<RingTensor>& mask = std::nullopt, std::size_t plan_rows = 0) {
  if (!truncates_exactly(p)) {
    auto probs = co_await softmax_last(p, x, mask, plan_rows);
    co_return co_await p.matmul_trunc(probs, v);
  }
  using Share = typename P::Share;
  auto e = co_await detail::softmax_numerators(p, std::move(x), mask, plan_rows);
  auto times_v = [&](P& q) -> Task<std::vector<Share>> {
    auto ev = co_await q.matmul_trunc(e, v);
    co_return std::vector<Share>{std::move(ev)};
  };
  co_return std::move((co_await detail::over_sum(p, e, times_v)).front());
}

}  // namespace mpcache::ops
