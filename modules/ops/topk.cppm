// Top-k along the last axis, two ways, both ordering by (value descending,
// index ascending) so that ties are broken by index and every backend agrees:
//   * topk_network: bitonic sorting network on (value, index) pairs,
//     log2(n)(log2(n)+1)/2 compare-exchange layers of one comparison's A2B
//     and one select by its bit (bit_times, 2 rounds) each;
//   * topk_rank: constant rounds: all n(n-1)/2 comparisons in one batch,
//     ranks by local sums, one-hot of the ranks, one multiplication round;
// and topk(), which picks the cheaper for n, k and a link model.
// Comparisons use key = value * 2^b + (n - 1 - index), b = ceil(log2 n), so
// values must satisfy |value| < 2^(62 - b).
module;
#include "prelude.hpp"
export module mpcache.ops:topk;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;
import :one_hot;
import :reduce;
import :link_model;

export namespace mpcache::ops {

template <Protocol P>
struct TopK {
  typename P::Share values;   // (..., k), descending
  typename P::Share indices;  // (..., k), integers
};

enum class TopKMethod { automatic, network, rank };

struct TopKCost {
  std::uint64_t rounds = 0;
  std::uint64_t bytes_per_party = 0;  // payload, rss3
  double seconds(const LinkModel& link) const {
    return link.seconds(static_cast<double>(rounds), static_cast<double>(bytes_per_party));
  }
};

namespace detail {
inline std::size_t next_pow2(std::size_t n) {
  std::size_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Local: key = value * 2^b + (n - 1 - index).
template <Protocol P>
typename P::Share sort_key(const P& p, const typename P::Share& value,
                           const typename P::Share& index, std::size_t n) {
  const int b = std::max(1, ceil_log2(n));
  const Shape s = P::shape(value);
  auto shifted = p.mul_public(value, ring_filled(s, Ring{1} << b));
  return p.add_public(p.sub(shifted, index), ring_filled(s, Ring(n - 1)));
}

template <Protocol P>
typename P::Share take(const typename P::Share& a, const std::vector<std::size_t>& idx) {
  return P::apply(a, [&](const RingTensor& t) { return ring_take_last(t, idx); });
}
}  // namespace detail

// Cost on rss3 per row (payload bytes per party): a layer's comparison
// bits = 13 words (A2B), its two selects by those bits = 3 words each
// (bit_times); 8 + 2 rounds; see compare.cppm.
inline TopKCost topk_network_cost(std::size_t n) {
  const std::uint64_t L = static_cast<std::uint64_t>(ceil_log2(detail::next_pow2(n)));
  const std::uint64_t layers = L * (L + 1) / 2;
  const std::uint64_t pairs = detail::next_pow2(n) / 2;
  return {layers * 10, layers * pairs * (13 + 2 * 3) * 8};
}

inline TopKCost topk_rank_cost(std::size_t n, std::size_t k) {
  const std::uint64_t pairs = n * (n - 1) / 2;
  const int w = std::max(1, ceil_log2(n));
  const std::uint64_t a2b_rounds = w >= 2 ? 2 + ceil_log2(static_cast<std::size_t>(w)) : 0;
  const std::uint64_t a2b_words = w >= 2 ? 2 * ceil_log2(static_cast<std::size_t>(w)) + 1 : 0;
  const std::uint64_t and_rounds = ceil_log2(static_cast<std::size_t>(w));
  return {10 + a2b_rounds + and_rounds + 2 + 1,
          (pairs * 15 + n * a2b_words + n * n * (and_rounds + 2) + n * k) * 8};
}

// `automatic` becomes the method with the lower modelled time on `link`.
inline TopKMethod resolve_topk_method(TopKMethod method, std::size_t n, std::size_t k, const LinkModel& link) {
  if (method != TopKMethod::automatic) return method;
  return topk_rank_cost(n, k).seconds(link) <= topk_network_cost(n).seconds(link) ? TopKMethod::rank
                                                                                  : TopKMethod::network;
}

template <Protocol P>
Task<TopK<P>> topk_network(P& p, typename P::Share x, std::size_t k) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.at(shape.size() - 1);
  if (k == 0 || k > n)
    throw Error(ErrorCode::invalid_argument,
                "top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
  const std::size_t m = detail::next_pow2(n);
  RingTensor iota = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  typename P::Share idx = public_share(p, x, iota);
  if (m > n) {  // pad with the smallest keys: minimal value, largest index
    Shape pad = shape;
    pad.back() = m - n;
    const Ring low = static_cast<Ring>(-(std::int64_t{1} << (61 - ceil_log2(m))));
    x = concat_last<P>(x, public_share(p, x, ring_filled(pad, low)));
    RingTensor pad_idx = RingTensor::from_shape(pad);
    for (std::size_t i = 0; i < pad_idx.size(); ++i) pad_idx.data()[i] = n + i % (m - n);
    idx = concat_last<P>(idx, public_share(p, x, pad_idx));
  }
  for (std::size_t size = 2; size <= m; size *= 2) {
    for (std::size_t j = size / 2; j >= 1; j /= 2) {
      // Pairs (i, i|j) with bit j clear; blocks with bit `size` clear sort
      // descending. u is the slot that must end up holding the larger key.
      std::vector<std::size_t> u, v;
      for (std::size_t i = 0; i < m; ++i) {
        if (i & j) continue;
        const bool descending = (i & size) == 0;
        u.push_back(descending ? i : (i | j));
        v.push_back(descending ? (i | j) : i);
      }
      auto xu = detail::take<P>(x, u), xv = detail::take<P>(x, v);
      auto iu = detail::take<P>(idx, u), iv = detail::take<P>(idx, v);
      auto swap = co_await less_than_bits(p, detail::sort_key(p, xu, iu, m),
                                          detail::sort_key(p, xv, iv, m));
      P pv = p.fork(), pi = p.fork();
      auto [new_xu, new_iu] =
          co_await when_all(select_by_bit(pv, swap, xv, xu), select_by_bit(pi, swap, iv, iu));
      auto new_xv = p.sub(p.add(xu, xv), new_xu);
      auto new_iv = p.sub(p.add(iu, iv), new_iu);
      // Scatter back: position u[t] <- new_u[t], v[t] <- new_v[t].
      std::vector<std::size_t> inverse(m);
      for (std::size_t t = 0; t < u.size(); ++t) {
        inverse[u[t]] = t;
        inverse[v[t]] = u.size() + t;
      }
      x = detail::take<P>(concat_last<P>(new_xu, new_xv), inverse);
      idx = detail::take<P>(concat_last<P>(new_iu, new_iv), inverse);
      if (j == 1) break;
    }
  }
  co_return TopK<P>{slice_last<P>(x, 0, k), slice_last<P>(idx, 0, k)};
}

namespace detail {
// Rank of each element along the last axis, 0 for the largest (ties: the
// lower index ranks first): all pairs i < j compared in one batch.
template <Protocol P>
Task<typename P::Share> ranks(P& p, const typename P::Share& x) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.back();
  RingTensor iota = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  typename P::Share rank = public_share(p, x, iota);  // j is second in j pairs
  if (n == 1) co_return rank;
  const auto key = sort_key(p, x, public_share(p, x, iota), n);
  std::vector<std::size_t> first, second;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      first.push_back(i);
      second.push_back(j);
    }
  // c = 1 when j beats i: rank_i += c; rank_j -= c (it had +1 already).
  auto beaten = co_await less_than(p, take<P>(key, first), take<P>(key, second));
  auto spread = P::apply(beaten, [&](const RingTensor& c) {
    Shape out_shape = shape_of(c);
    out_shape.back() = n;
    RingTensor out = ring_zeros(out_shape);
    const std::size_t pairs = first.size(), rows = c.size() / pairs;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t q = 0; q < pairs; ++q) {
        out.data()[r * n + first[q]] += c.data()[r * pairs + q];
        out.data()[r * n + second[q]] -= c.data()[r * pairs + q];
      }
    return out;
  });
  co_return p.add(rank, spread);
}
}  // namespace detail

template <Protocol P>
Task<TopK<P>> topk_rank(P& p, typename P::Share x, std::size_t k) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.at(shape.size() - 1);
  if (k == 0 || k > n)
    throw Error(ErrorCode::invalid_argument,
                "top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
  RingTensor iota = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  auto rank = co_await detail::ranks(p, x);
  // sel[..., i, r] = [rank_i == r] for r < k.
  auto sel = co_await one_hot(p, rank, n);
  sel = P::apply(sel, [&](const RingTensor& t) { return ring_slice_last(t, 0, k); });
  auto spread_x = P::apply(x, [&](const RingTensor& t) { return ring_repeat_last(t, k); });
  auto picked = co_await p.mul(sel, spread_x);
  auto values = P::apply(picked, [](const RingTensor& t) { return ring_sum_second_last(t); });
  RingTensor weights = ring_repeat_last(iota, k);
  auto indices = P::apply(p.mul_public(sel, weights),
                          [](const RingTensor& t) { return ring_sum_second_last(t); });
  co_return TopK<P>{std::move(values), std::move(indices)};
}

// (..., n, k) -> (..., k, n), local.
template <Protocol P>
typename P::Share swap_last_two(const typename P::Share& a) {
  return P::apply(a, [](const RingTensor& t) {
    const Shape s = shape_of(t);
    const std::size_t n = s[s.size() - 2], k = s.back(), batch = t.size() / (n * k);
    Shape out_shape = s;
    out_shape[s.size() - 2] = k;
    out_shape.back() = n;
    RingTensor out = RingTensor::from_shape(out_shape);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t r = 0; r < k; ++r) out.data()[(b * k + r) * n + i] = t.data()[(b * n + i) * k + r];
    return out;
  });
}

template <Protocol P>
Task<TopK<P>> topk(P& p, typename P::Share x, std::size_t k,
                   TopKMethod method = TopKMethod::automatic, LinkModel link = {}) {
  const std::size_t n = P::shape(x).back();
  if constexpr (NativeReal<P>) {
    if (k == 0 || k > n)
      throw Error(ErrorCode::invalid_argument,
                  "top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
    Shape out_shape = P::shape(x);
    out_shape.back() = k;
    RealTensor values = xt::empty<double>(out_shape), indices = xt::empty<double>(out_shape);
    std::vector<std::size_t> order(n);
    for (std::size_t r = 0; r < values.size() / k; ++r) {
      const double* row = x.value.data() + r * n;
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [row](std::size_t a, std::size_t b) {
                          return row[a] != row[b] ? row[a] > row[b] : a < b;
                        });
      for (std::size_t j = 0; j < k; ++j) {
        values.data()[r * k + j] = row[order[j]];
        indices.data()[r * k + j] = static_cast<double>(order[j]);
      }
    }
    co_return TopK<P>{typename P::Share{std::move(values)}, typename P::Share{std::move(indices)}};
  }
  method = resolve_topk_method(method, n, k, link);
  if (method == TopKMethod::rank) co_return co_await topk_rank(p, std::move(x), k);
  co_return co_await topk_network(p, std::move(x), k);
}

// One-hot (..., n), arithmetic 0/1, of the largest element of each row
// (the lowest index on ties), by the tournament of argmax_last. Each
// level's winner bits select their values for the next level and, off the
// critical path, the running one-hot of the elements still in the game
// (both bit_dot: B2A fused with the selecting product); the last level's
// select is the answer. Rounds: the tournament's, sum of
// tournament_level_rounds over the plan; comparisons about n, not n^2/2.
template <Protocol P>
Task<typename P::Share> argmax_onehot_last(P& p, typename P::Share x, int width = ring_bits) {
  using Share = typename P::Share;
  const Shape shape = P::shape(x);
  if (shape.empty() || shape.back() == 0)
    throw Error(ErrorCode::invalid_argument, "argmax over an empty last axis, shape " + shape_string(shape));
  const std::size_t n = shape.back(), rows = x_rows(shape);
  if constexpr (NativeReal<P>) {
    auto best = co_await argmax_last(p, std::move(x), true, 0, width);
    co_return co_await one_hot(p, reshape<P>(best.index, Shape(shape.begin(), shape.end() - 1)), n);
  } else {
    if (n == 1) co_return public_share(p, x, ring_filled(shape, 1));
    const std::vector<std::size_t> plan = tournament_plan(rows, n, width);
    std::optional<Share> running;  // (rows, n): 1 where the element won every level so far
    std::size_t span = 1;          // original elements per candidate of the current level
    Share candidates = reshape<P>(x, {rows, n});
    for (std::size_t level = 0;; ++level) {
      const std::size_t m = std::min(plan.at(level), P::shape(candidates).back());
      const auto xs = pad_to_groups(p, candidates, m, tournament_floor(width));
      auto wins = co_await group_win_bits(p, xs, m, width);  // (rows, padded)
      // Element i of a row follows candidate i / span.
      auto per_element = P::apply(wins, [=](const RingTensor& t) {
        RingTensor out = RingTensor::from_shape({rows, n});
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t i = 0; i < n; ++i) out(r, i) = t(r, i / span);
        return out;
      });
      auto still_in = [&](P& q) -> Task<Share> {
        if (!running) co_return co_await q.bit_to_arith(per_element);
        co_return co_await bit_times(q, per_element, *running);
      };
      if (P::shape(xs).back() == m) co_return reshape<P>(co_await still_in(p), shape);  // the last level
      P pc = p.fork(), pr = p.fork();
      auto [c, r] = co_await when_all(group_select(pc, wins, xs, m), still_in(pr));
      candidates = std::move(c);
      running = std::move(r);
      span *= m;
    }
  }
}

// Top-k as one-hot rows: (..., n) -> (..., k, n), row r the one-hot of the
// r-th best element (same order as topk()). The rank method produces this
// matrix on its way anyway, so this saves the value product and, for the
// caller, a second one-hot of the indices: gather with one matmul.
// With k = 1 the comparisons may be narrowed to `width` bits when the
// caller bounds the values: |x| < 2^(width-2) (see argmax_last).
template <Protocol P>
Task<typename P::Share> topk_onehot(P& p, typename P::Share x, std::size_t k,
                                    TopKMethod method = TopKMethod::automatic, LinkModel link = {},
                                    int width = ring_bits) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.back();
  if (k == 0 || k > n)
    throw Error(ErrorCode::invalid_argument,
                "top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
  method = resolve_topk_method(method, n, k, link);
  if (!NativeReal<P> && k == 1 && n <= 64 && method == TopKMethod::rank) {
    // The best one: all pairs in one batch, then an AND of n - 1 bits (no
    // ranks, no one-hot encoding): 8 + ceil(log2(n - 1)) + 2 rounds.
    if (n == 1) co_return public_share(p, x, ring_filled(shape, 1));
    auto wins = co_await group_wins(p, x, n, width);
    Shape out = shape;
    out.insert(out.end() - 1, 1);
    co_return reshape<P>(wins, out);
  }
  if (!NativeReal<P> && k == 1 && n > 64) {
    // The best one of a long row: the tournament's levels, its comparisons
    // about n (all pairs would be n^2/2, ranks or a sort far more rounds).
    auto hot = co_await argmax_onehot_last(p, std::move(x), width);
    Shape out = shape;
    out.insert(out.end() - 1, 1);
    co_return reshape<P>(hot, out);
  }
  if (NativeReal<P> || method == TopKMethod::network) {
    auto top = co_await topk(p, std::move(x), k, method, link);
    co_return co_await one_hot(p, top.indices, n);
  }
  auto rank = co_await detail::ranks(p, x);
  // (..., n, k): a rank in [k, n) matches no class (compared on log2 n bits).
  auto sel = co_await one_hot(p, rank, k, ceil_log2(n));
  co_return swap_last_two<P>(sel);
}

}  // namespace mpcache::ops
