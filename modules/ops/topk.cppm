// Top-k along the last axis, three ways, all ordering by (value descending,
// index ascending) so that ties are broken by index and every backend agrees:
//   * topk_network: a bitonic sorting network on keys,
//     log2(N)(log2(N)+1)/2 compare-exchange layers (N = n rounded up to a
//     power of two);
//   * topk_blocks, a top-k that stops at k: blocks of K = next_pow2(k)
//     sorted by the same network, then pairs of blocks merged keeping the
//     larger K (one compare-exchange layer takes the max of A[i] and
//     B[K-1-i], a bitonic sequence, then log2 K merge layers sort it) until
//     one block is left: log2 K (log2 K + 1)/2 + log2(N/K)(log2 K + 1)
//     layers of fewer pairs;
//   * topk_rank: constant rounds: all n(n-1)/2 comparisons in one batch,
//     ranks by local sums, one-hot of the ranks, one multiplication round;
// and topk(), which picks the cheapest for n, k and a link model.
// Both networks move one key per element, key = value * 2^b + (N - 1 -
// index), b = ceil(log2 N): a layer is one comparison's sign bits
// (msb_bits) and one select by them (bit_times, 2 rounds); at the end the
// k best keys are split back into index (A2B of the low b bits, B2A) and
// value (an exact division by 2^b).
// Values must satisfy |value| < 2^(w - 2) with w = min(width, 64 - b): the
// caller passes `width` from the bound its values have, and comparisons run
// on w + b bits.
export module mpcache.ops:topk;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;
import :one_hot;
import :reduce;

export namespace mpcache::ops {

template <Protocol P>
struct TopK {
  typename P::Share values;   // (..., k), descending
  typename P::Share indices;  // (..., k), integers
};

enum class TopKMethod { automatic, network, blocks, rank };

namespace detail {
inline std::size_t next_pow2(std::size_t n) {
  std::size_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The bits a rank in [0, n) needs; ranks() is exact only mod 2^rank_bits.
inline int rank_bits(std::size_t n) { return std::max(1, ceil_log2(n)); }

// b: the bits a key gives the index (positions 0..m-1 of the padded row).
inline int key_shift(std::size_t m) { return std::max(1, ceil_log2(m)); }
// w: the values' comparison width, so that keys compare on w + b bits.
inline int value_width(int width, std::size_t m) { return std::min(width, ring_bits - key_shift(m)); }

// Local: key = value * 2^b + (m - 1 - index).
template <Protocol P>
typename P::Share sort_key(const P& p, const typename P::Share& value,
                           const typename P::Share& index, std::size_t m) {
  const int b = key_shift(m);
  const Shape s = P::shape(value);
  auto shifted = p.mul_public(value, ring_filled(s, Ring{1} << b));
  return p.add_public(p.sub(shifted, index), ring_filled(s, Ring(m - 1)));
}

// sort_key needs fixed-point codes (integers): then a larger value always
// gives a larger key. Ring backends hold codes; an ExactReals backend holds
// reals, and of two that differ by less than one code the one with the lower
// index would get the larger key, against the values' order. Before keys are
// built from values that a top-k also ranks, this rounds such reals to codes
// (ties then break by index, as on the ring); on ring backends it is x.
template <Protocol P>
typename P::Share fixed_point_codes(const P& p, const typename P::Share& x) {
  if constexpr (ExactReals<P>) {
    const double scale = std::ldexp(1.0, p.frac_bits());
    return p.map_real(x, [scale](double v) { return std::nearbyint(v * scale) / scale; });
  } else {
    (void)p;
    return x;
  }
}

template <Protocol P>
typename P::Share take(const typename P::Share& a, const std::vector<std::size_t>& idx) {
  return P::apply(a, [&](const RingTensor& t) { return ring_take_last(t, idx); });
}

// One step of a sorting plan: compare-exchange (u[t] gets the larger key
// of u[t], v[t]), then keep only `keep` (in order; empty: all).
struct SortStep {
  std::vector<std::size_t> u, v, keep;
};

// Bitonic sort of every block of `block` positions of m, each descending.
inline void add_block_sort(std::vector<SortStep>& plan, std::size_t m, std::size_t block) {
  for (std::size_t size = 2; size <= block; size *= 2)
    for (std::size_t j = size / 2; j >= 1; j /= 2) {
      SortStep step;
      step.u.reserve(m / 2);
      step.v.reserve(m / 2);
      for (std::size_t i = 0; i < m; ++i) {
        const std::size_t local = i % block;
        if (local & j) continue;
        const bool descending = (local & size) == 0;
        step.u.push_back(descending ? i : i + j);
        step.v.push_back(descending ? i + j : i);
      }
      plan.push_back(std::move(step));
      if (j == 1) break;
    }
}

// Sort blocks of `block`, then merge pairs of blocks keeping the larger
// half until one block is left. block == m: a full bitonic sort.
inline std::vector<SortStep> block_topk_plan(std::size_t m, std::size_t block) {
  std::vector<SortStep> plan;
  add_block_sort(plan, m, block);
  for (std::size_t blocks = m / block; blocks > 1; blocks /= 2) {
    SortStep keep_max;
    for (std::size_t q = 0; q < blocks; q += 2)
      for (std::size_t i = 0; i < block; ++i) {
        keep_max.u.push_back(q * block + i);
        keep_max.v.push_back((q + 1) * block + block - 1 - i);
        keep_max.keep.push_back(q * block + i);
      }
    plan.push_back(std::move(keep_max));
    const std::size_t left = blocks / 2 * block;
    for (std::size_t j = block / 2; j >= 1; j /= 2) {  // bitonic merge, descending
      SortStep step;
      for (std::size_t i = 0; i < left; ++i) {
        if ((i % block) & j) continue;
        step.u.push_back(i);
        step.v.push_back(i + j);
      }
      plan.push_back(std::move(step));
      if (j == 1) break;
    }
  }
  return plan;
}

inline std::size_t topk_block(std::size_t n, std::size_t k, TopKMethod method) {
  const std::size_t m = next_pow2(n);
  return method == TopKMethod::blocks ? std::min(m, next_pow2(k)) : m;
}

// Every step: u[t] and v[t] swap where key_u < key_v. One msb_bits of the
// differences, one bit_times of the sign bits with them.
template <Protocol P>
Task<typename P::Share> run_sort_plan(P& p, typename P::Share keys, const std::vector<SortStep>& plan, int width) {
  using Share = typename P::Share;
  for (const SortStep& step : plan) {
    const Share ku = take<P>(keys, step.u), kv = take<P>(keys, step.v);
    const Share difference = p.sub(kv, ku);
    const Share negated = p.neg(difference);  // < 0 where v holds the larger key
    const auto swap = co_await msb_bits(p, negated, width);
    const Share delta = co_await bit_times(p, swap, difference);
    const Share exchanged = concat_last<P>(p.add(ku, delta), p.sub(kv, delta));  // (..., 2 pairs)
    // Local, in place of every component: positions u[t] and v[t] take the exchanged keys.
    keys = P::apply2(keys, exchanged, [&step](const RingTensor& k, const RingTensor& e) {
      RingTensor out = k;
      const std::size_t m = k.shape().back(), pairs = step.u.size(), rows = m ? k.size() / m : 0;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t t = 0; t < pairs; ++t) {
          out.data()[r * m + step.u[t]] = e.data()[r * 2 * pairs + t];
          out.data()[r * m + step.v[t]] = e.data()[r * 2 * pairs + pairs + t];
        }
      return out;
    });
    if (!step.keep.empty()) keys = take<P>(keys, step.keep);
  }
  co_return keys;
}

// The k best keys back to values and indices: index = m - 1 - (key mod
// 2^b) by A2B of b bits and B2A, value = (key - low) / 2^b, an exact
// multiple (truncation is exact on multiples).
template <Protocol P>
Task<TopK<P>> split_keys(P& p, const typename P::Share& keys, std::size_t m) {
  const int b = key_shift(m);
  const Shape s = P::shape(keys);
  auto bits = co_await p.to_bits(keys, b);
  const auto spread = P::apply(bits, [b](const RingTensor& t) { return ring_bits_to_axis(t, b); });
  const auto ones = co_await p.bit_to_arith(spread);
  std::vector<Ring> weights(static_cast<std::size_t>(b));
  for (int t = 0; t < b; ++t) weights[static_cast<std::size_t>(t)] = Ring{1} << t;
  const auto low = P::apply(ones, [&](const RingTensor& t) { return ring_weighted_sum_last(t, weights); });
  auto indices = p.add_public(p.neg(low), ring_filled(s, Ring(m - 1)));
  const auto multiple = p.sub(keys, low);
  auto values = co_await p.truncate(multiple, b);
  co_return TopK<P>{std::move(values), std::move(indices)};
}

inline void check_topk(std::size_t n, std::size_t k) {
  if (k == 0 || k > n)
    throw Error(ErrorCode::invalid_argument,
                "top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
}
}  // namespace detail

// Cost of topk_network / topk_blocks over `rows` rows of n on backend
// costs C (CostsOf<P>), from a fresh protocol object (layer L's comparison
// is run by the object's L-th fork): bytes exact; rounds the sum of the
// steps', an upper bound on the critical path (on rss3 a comparison's lead
// sends its first message without waiting, so measured layers overlap by
// about a round).
template <CostModel C>
OpCost topk_sort_cost(std::size_t n, std::size_t k, TopKMethod method, int width = ring_bits, std::size_t rows = 1) {
  const std::size_t m = detail::next_pow2(n);
  const int b = detail::key_shift(m), key_width = detail::value_width(width, m) + b;
  OpCost cost;
  std::size_t layer = 0;
  for (const auto& step : detail::block_topk_plan(m, detail::topk_block(n, k, method))) {
    const std::size_t pairs = step.u.size() * rows;
    cost += C::msb_bits(key_width, pairs, layer++) + C::bit_dot(pairs, 1);  // compare, then bit_times
  }
  // split_keys: A2B of b bits, B2A of k b bits, an exact division by 2^b.
  const std::size_t out = k * rows;
  if (b >= 2) cost += C::to_bits(b, out);
  return cost + C::bit_to_arith(out * static_cast<std::size_t>(b)) + C::truncate(out);
}
template <CostModel C>
OpCost topk_network_cost(std::size_t n, std::size_t k, int width = ring_bits, std::size_t rows = 1) {
  return topk_sort_cost<C>(n, k, TopKMethod::network, width, rows);
}
template <CostModel C>
OpCost topk_blocks_cost(std::size_t n, std::size_t k, int width = ring_bits, std::size_t rows = 1) {
  return topk_sort_cost<C>(n, k, TopKMethod::blocks, width, rows);
}

// topk_rank: all pairs' comparisons and their B2A, the ranks' one-hot (A2B
// of ceil(log2 n) bits, an AND tree, B2A), the selecting product.
template <CostModel C>
OpCost topk_rank_cost(std::size_t n, std::size_t k, int width = ring_bits, std::size_t rows = 1) {
  const std::size_t pairs = n * (n - 1) / 2 * rows;
  const int key_width = detail::value_width(width, n) + detail::key_shift(n);
  const int w = std::max(1, ceil_log2(n));
  OpCost cost = msb_arith_cost<C>(key_width, pairs, 0, detail::rank_bits(n));
  if (w >= 2) cost += C::to_bits(w, rows * n);
  cost += C::bits_and(and_tree_words(rows * n * n, w)).repeated(static_cast<std::uint64_t>(ceil_log2(static_cast<std::size_t>(w))));
  return cost + C::bit_to_arith(rows * n * n) + C::mul(rows * n * k);
}

// The rank method holds n^2 words a row and component (the pairs' signs,
// the ranks' one-hot): `automatic` considers it up to this n only (2 MiB a
// row), where the sorting networks hold n.
inline constexpr std::size_t topk_rank_max_n = 512;

// `automatic` becomes the method with the lowest modelled time on `link`.
template <CostModel C>
TopKMethod resolve_topk_method(TopKMethod method, std::size_t n, std::size_t k, const Link& link, int width = ring_bits) {
  if (method != TopKMethod::automatic) return method;
  const double network = topk_network_cost<C>(n, k, width).seconds(link);
  const double blocks = topk_blocks_cost<C>(n, k, width).seconds(link);
  if (n <= topk_rank_max_n && topk_rank_cost<C>(n, k, width).seconds(link) <= std::min(network, blocks))
    return TopKMethod::rank;
  return blocks < network ? TopKMethod::blocks : TopKMethod::network;
}

// topk_network (block = the whole row) or topk_blocks.
template <Protocol P>
Task<TopK<P>> topk_sorted(P& p, typename P::Share x, std::size_t k, TopKMethod method, int width = ring_bits) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.at(shape.size() - 1);
  detail::check_topk(n, k);
  const std::size_t m = detail::next_pow2(n);
  const int b = detail::key_shift(m), vw = detail::value_width(width, m);
  if (vw < 3)
    throw Error(ErrorCode::invalid_argument, "top-k: comparison width " + std::to_string(width) + " is below 3");
  RingTensor iota = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  auto keys = detail::sort_key(p, x, public_share(p, x, iota), m);
  if (m > n) {  // pad with the smallest keys: a value below every allowed one, indices n..m-1
    Shape pad = shape;
    pad.back() = m - n;
    RingTensor pad_keys = RingTensor::from_shape(pad);
    const Ring low = static_cast<Ring>(-(std::int64_t{1} << (vw - 2)));
    for (std::size_t i = 0; i < pad_keys.size(); ++i) pad_keys.data()[i] = (low << b) + Ring(m - 1 - (n + i % (m - n)));
    keys = concat_last<P>(keys, public_share(p, x, pad_keys));
  }
  const auto plan = detail::block_topk_plan(m, detail::topk_block(n, k, method));
  auto sorted = co_await detail::run_sort_plan(p, std::move(keys), plan, vw + b);
  const auto best = slice_last<P>(sorted, 0, k);
  co_return co_await detail::split_keys(p, best, m);
}

template <Protocol P>
Task<TopK<P>> topk_network(P& p, typename P::Share x, std::size_t k, int width = ring_bits) {
  co_return co_await topk_sorted(p, std::move(x), k, TopKMethod::network, width);
}

template <Protocol P>
Task<TopK<P>> topk_blocks(P& p, typename P::Share x, std::size_t k, int width = ring_bits) {
  co_return co_await topk_sorted(p, std::move(x), k, TopKMethod::blocks, width);
}

namespace detail {
// Rank of each element along the last axis, 0 for the largest (ties: the
// lower index ranks first): all pairs i < j compared in one batch.
template <Protocol P>
Task<typename P::Share> ranks(P& p, const typename P::Share& x, int width = ring_bits) {
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
  // A rank is read only mod 2^rank_bits(n) (one_hot's A2B), so the signs
  // are needed only that far: a backend's B2A then sends fewer bytes.
  const auto first_keys = take<P>(key, first), second_keys = take<P>(key, second);
  auto beaten = co_await less_than(p, first_keys, second_keys, value_width(width, n) + key_shift(n), rank_bits(n));
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
Task<TopK<P>> topk_rank(P& p, typename P::Share x, std::size_t k, int width = ring_bits) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.at(shape.size() - 1);
  detail::check_topk(n, k);
  RingTensor iota = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  auto rank = co_await detail::ranks(p, x, width);
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

// width: the values' comparison width, |x| < 2^(width - 2) (see the top of
// this file); the method is picked for it.
template <Protocol P>
Task<TopK<P>> topk(P& p, typename P::Share x, std::size_t k,
                   TopKMethod method = TopKMethod::automatic, Link link = lan_link(), int width = ring_bits) {
  const std::size_t n = P::shape(x).back();
  if constexpr (ExactReals<P>) {
    detail::check_topk(n, k);
    auto [values, indices] = p.exact_topk_last(x, k);
    co_return TopK<P>{std::move(values), std::move(indices)};
  }
  detail::check_topk(n, k);
  method = with_costs(p, [&]<CostModel C>() { return resolve_topk_method<C>(method, n, k, link, width); });
  if (method == TopKMethod::rank) co_return co_await topk_rank(p, std::move(x), k, width);
  co_return co_await topk_sorted(p, std::move(x), k, method, width);
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
  if constexpr (ExactReals<P>) {
    auto best = co_await argmax_last(p, std::move(x), true, 0, width);
    co_return co_await one_hot(p, reshape<P>(best.index, Shape(shape.begin(), shape.end() - 1)), n);
  } else {
    if (n == 1) co_return public_share(p, x, ring_filled(shape, 1));
    const std::vector<std::size_t> plan =
        with_costs(p, [&]<CostModel C>() { return tournament_plan<C>(rows, n, width); });
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
// The comparisons may be narrowed to `width` bits when the caller bounds
// the values: |x| < 2^(width-2) (see argmax_last and the top of this file).
template <Protocol P>
Task<typename P::Share> topk_onehot(P& p, typename P::Share x, std::size_t k,
                                    TopKMethod method = TopKMethod::automatic, Link link = lan_link(),
                                    int width = ring_bits) {
  const Shape shape = P::shape(x);
  const std::size_t n = shape.back();
  if (k == 0 || k > n)
    throw Error(ErrorCode::invalid_argument,
                "top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
  method = with_costs(p, [&]<CostModel C>() { return resolve_topk_method<C>(method, n, k, link, width); });
  if (!ExactReals<P> && k == 1 && n <= 64 && method == TopKMethod::rank) {
    // The best one: all pairs in one batch, then an AND of n - 1 bits (no
    // ranks, no one-hot encoding): 8 + ceil(log2(n - 1)) + 2 rounds.
    if (n == 1) co_return public_share(p, x, ring_filled(shape, 1));
    auto wins = co_await group_wins(p, x, n, width);
    Shape out = shape;
    out.insert(out.end() - 1, 1);
    co_return reshape<P>(wins, out);
  }
  if (!ExactReals<P> && k == 1 && n > 64) {
    // The best one of a long row: the tournament's levels, its comparisons
    // about n (all pairs would be n^2/2, ranks or a sort far more rounds).
    auto hot = co_await argmax_onehot_last(p, std::move(x), width);
    Shape out = shape;
    out.insert(out.end() - 1, 1);
    co_return reshape<P>(hot, out);
  }
  if (ExactReals<P> || method != TopKMethod::rank) {
    auto top = co_await topk(p, std::move(x), k, method, link, width);
    co_return co_await one_hot(p, top.indices, n);
  }
  auto rank = co_await detail::ranks(p, x, width);
  // (..., n, k): a rank in [k, n) matches no class (compared on log2 n bits).
  auto sel = co_await one_hot(p, rank, k, ceil_log2(n));
  co_return swap_last_two<P>(sel);
}

}  // namespace mpcache::ops
