// max and argmax along the last axis by a tournament of groups of m adjacent
// elements: in each group all m(m-1)/2 comparisons run in one batch (the
// sign bits only, msb_bits: 6 rounds on rss3 at 64 bits); a candidate wins if it
// beats every other one (an AND of m-1 bits, ceil(log2(m-1)) rounds), and
// its bit selects its value and index (bit_dot: B2A fused with the product,
// 2 rounds). At 64 bits a level costs 8 rounds for m = 2 (pairs), 10 for
// m = 4, 11 for m = 8, 12 for m = 16, 14 for m = 64: larger groups shorten the critical
// path at the price of more comparisons. Each level's m is chosen by a link
// model (the paper's LAN) from the row count and the remaining length, so
// a long row may take wide groups first and one all-pairs group last.
// Comparisons may be narrowed to `width` bits when the caller bounds the
// values: |x| < 2^(width-2) (fixed point, as ring integers).
// Ties keep the lower index, so every backend returns the same index.
//
// A level of pairs may instead select by the difference d = x_a - x_b:
// x_a - [x_a < x_b] d, one term per output, by bit_dot (B2A fused, 2
// rounds) or by the sign's arithmetic 0/1 and a product (3 rounds, fewer
// bytes: a prefill's many rows take it).
//
// Where the backend's comparisons yield arithmetic 0/1 in as few rounds
// as bits (ArithmeticSignCosts: rss3 dcf), a level may instead count wins:
// all pairs' signs as ring values (2 rounds), each candidate's wins minus
// m - 1 summed locally (0 for the winner alone, negative for the others),
// its sign on ceil(log2 m) + 1 bits (2 rounds), then one product of the
// winner's 0/1 with values and indices, summed per group (1 round): 5
// rounds for any m. The planner picks, per level, m and the way by cost.
export module mpcache.ops:reduce;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;

export namespace mpcache::ops {

template <Protocol P>
struct ArgMax {
  typename P::Share value;  // (..., 1)
  typename P::Share index;  // (..., 1), integer (not fixed-point)
};

namespace detail {
inline std::size_t tournament_and_rounds(std::size_t m) {
  return m > 2 ? static_cast<std::size_t>(ceil_log2(m - 1)) : 0;
}
}  // namespace detail

inline constexpr std::size_t tournament_max_group = 64;

// Rounds of one tournament level of groups of m on backend costs C, and
// words sent per group by the busiest party: the differences' sign bits
// (`width` bits), the AND tree, and bit_dot of the winners' bits with values
// and indices.
template <CostModel C>
std::size_t tournament_level_rounds(std::size_t m, int width = ring_bits) {
  return C::msb_bits(width, 1, 0).rounds + detail::tournament_and_rounds(m) * C::bits_and(1).rounds +
         C::bit_dot(1, 1).rounds;
}
template <CostModel C>
double tournament_group_words(std::size_t m, int width = ring_bits) {
  const double pairs = double(m) * double(m - 1) / 2;
  return msb_bits_words<C>(width) * pairs + double(C::bits_and(m * detail::tournament_and_rounds(m)).max_bytes()) / 8 +
         double(C::bit_dot(2 * m, m).max_bytes()) / 8;
}

// A level that counts wins (above): the width of its second comparison,
// whose inputs lie in [-(m-1), 0].
inline int tournament_count_width(std::size_t m) { return std::max(2, ceil_log2(m) + 1); }

// Words (of 8 bytes) per element of an arithmetic sign at `width` (needed
// mod 2^result_bits) for the busiest party, as msb_bits_words.
template <CostModel C>
double msb_arith_words(int width, int result_bits = ring_bits) {
  constexpr std::size_t n = 3 * 64 * 1024;
  return double(msb_arith_cost<C>(width, n, 0, result_bits).max_bytes()) / double(n) / 8.0;
}

// The same two numbers for a level that counts wins: the pairs' signs
// (needed mod 2^tournament_count_width(m) only: their sum is compared on
// that many bits), the count's sign, one product of values and indices.
template <CostModel C>
std::size_t tournament_count_level_rounds(std::size_t m, int width = ring_bits) {
  return msb_arith_cost<C>(width, 1, 0).rounds + msb_arith_cost<C>(tournament_count_width(m), 1, 0).rounds +
         C::mul(1).rounds;
}
template <CostModel C>
double tournament_count_group_words(std::size_t m, int width = ring_bits) {
  const double pairs = double(m) * double(m - 1) / 2;
  return msb_arith_words<C>(width, tournament_count_width(m)) * pairs +
         msb_arith_words<C>(tournament_count_width(m)) * double(m) +
         double(C::mul(2 * m).max_bytes()) / 8;
}

// A level of pairs that selects by the difference (m = 2): the sign s of
// d = x_a - x_b, then x_a - s d (and i_a - s (i_a - i_b)): one term per
// output where the bits' way selects among two (bit_dot: 16 bytes a term
// and 8 an output on rss3), so about 40 bytes a pair where 56 were.
template <CostModel C>
std::size_t tournament_difference_level_rounds(int width = ring_bits) {
  return C::msb_bits(width, 1, 0).rounds + C::bit_dot(1, 1).rounds;
}
template <CostModel C>
double tournament_difference_pair_words(int width = ring_bits) {
  return msb_bits_words<C>(width) + double(C::bit_dot(2, 1).max_bytes()) / 8;
}

// The same with the sign made arithmetic first (msb: on rss3's circuit
// msb_bits then B2A, 2 rounds and a word) and a plain product per output
// (1 round, a word): a round more than bit_dot, and on rss3 24 bytes a
// pair less where the index rides along (8 where it does not), which a
// prefill's waves of scores, where bytes cost more than rounds, take.
template <CostModel C>
std::size_t tournament_difference_arith_level_rounds(int width = ring_bits) {
  return msb_arith_cost<C>(width, 1, 0).rounds + C::mul(1).rounds;
}
template <CostModel C>
double tournament_difference_arith_pair_words(int width = ring_bits) {
  return msb_arith_words<C>(width) + double(C::mul(2).max_bytes()) / 8;
}

// One level of a tournament: its group size, and whether it counts wins
// or (pairs only) selects by the difference, by the sign's bits (bit_dot)
// or by its arithmetic 0/1 (`arithmetic`: B2A, then a product).
struct TournamentLevel {
  std::size_t m = 2;
  bool by_counts = false;
  bool by_difference = false;
  bool arithmetic = false;
  bool operator==(const TournamentLevel&) const = default;
};

// The levels, first to last, that minimise rounds x RTT + bytes / bandwidth
// on `link` (by default the paper's LAN) for `rows` rows of length n on
// backend costs C: a shortest path over the remaining lengths. Levels count
// wins only where C prices arithmetic signs (and `counts` allows it), and
// then only where cheaper. The bytes include the keys a dcf dealer sends
// inline: with an offline store most of them move offline, but the plan
// stays the one the store-less run makes (the store may run dry, and its
// keys cost bandwidth too, only earlier).
template <CostModel C>
std::vector<TournamentLevel> tournament_levels(std::size_t rows, std::size_t n, int width = ring_bits,
                                               const Link& link = lan_link(), bool counts = ArithmeticSignCosts<C>,
                                               bool differences = true) {
  // A level's rounds and words per group, by group size and way (computed
  // once): 0 bits, 1 counts (where priced), 2 the difference (pairs), 3 the
  // difference by an arithmetic sign.
  constexpr double never = std::numeric_limits<double>::infinity();
  constexpr int ways = 4;
  std::vector<std::array<double, ways>> level_rounds(tournament_max_group + 1, {never, never, never, never}),
      group_words(tournament_max_group + 1, {never, never, never, never});
  for (std::size_t m = 2; m <= std::min(n, tournament_max_group); ++m) {
    level_rounds[m][0] = double(tournament_level_rounds<C>(m, width));
    group_words[m][0] = tournament_group_words<C>(m, width);
    if (counts) {
      level_rounds[m][1] = double(tournament_count_level_rounds<C>(m, width));
      group_words[m][1] = tournament_count_group_words<C>(m, width);
    }
  }
  if (n >= 2 && differences) {
    level_rounds[2][2] = double(tournament_difference_level_rounds<C>(width));
    group_words[2][2] = tournament_difference_pair_words<C>(width);
    level_rounds[2][3] = double(tournament_difference_arith_level_rounds<C>(width));
    group_words[2][3] = tournament_difference_arith_pair_words<C>(width);
  }
  // best[len] = (cost to reduce len candidates to one, its first level).
  std::vector<std::pair<double, TournamentLevel>> best(n + 1, {0.0, {}});
  for (std::size_t len = 2; len <= n; ++len) {
    best[len].first = std::numeric_limits<double>::infinity();
    for (std::size_t m = 2; m <= std::min(len, tournament_max_group); ++m)
      for (int way = 0; way < ways; ++way) {
        if (level_rounds[m][way] == never) continue;
        const std::size_t groups = (len + m - 1) / m;
        const double cost = link.seconds(level_rounds[m][way], double(rows * groups) * group_words[m][way] * 8) +
                            best[groups].first;
        if (cost < best[len].first) best[len] = {cost, {m, way == 1, way >= 2, way == 3}};
      }
  }
  std::vector<TournamentLevel> plan;
  for (std::size_t len = n; len > 1; len = (len + best[len].second.m - 1) / best[len].second.m)
    plan.push_back(best[len].second);
  return plan;
}

// The group sizes of the levels that select by bits (argmax_onehot_last's).
template <CostModel C>
std::vector<std::size_t> tournament_plan(std::size_t rows, std::size_t n, int width = ring_bits,
                                         const Link& link = lan_link()) {
  std::vector<std::size_t> plan;
  for (const TournamentLevel& level : tournament_levels<C>(rows, n, width, link, false, false)) plan.push_back(level.m);
  return plan;
}

// With a fixed group size: count wins where C prices arithmetic signs and
// that is cheaper for `groups` groups (all rows) on the LAN.
template <CostModel C>
bool tournament_counts_at(std::size_t m, std::size_t groups, int width) {
  if constexpr (!ArithmeticSignCosts<C>) {
    return false;
  } else {
    const Link link = lan_link();
    return link.seconds(double(tournament_count_level_rounds<C>(m, width)),
                        double(groups) * tournament_count_group_words<C>(m, width) * 8) <
           link.seconds(double(tournament_level_rounds<C>(m, width)), double(groups) * tournament_group_words<C>(m, width) * 8);
  }
}

inline std::size_t x_rows(const Shape& shape) {
  std::size_t r = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

// Boolean bit 0 per element of xs (..., groups * m): 1 for the winner of
// its group of m adjacent elements (the largest, the lowest index on ties).
// msb_bits (6 rounds at 64 bits) + AND ceil(log2(m - 1)) rounds on rss3.
namespace detail {
// x_a - x_b for the pairs a < b of every group of m adjacent elements of
// xs (..., groups * m), on the last axis in the order (group, a, b).
template <Protocol P>
typename P::Share pair_differences(const P& p, const typename P::Share& xs, std::size_t m) {
  const std::size_t groups = P::shape(xs).back() / m;
  std::vector<std::size_t> first, second;
  for (std::size_t q = 0; q < groups; ++q)
    for (std::size_t a = 0; a < m; ++a)
      for (std::size_t b = a + 1; b < m; ++b) {
        first.push_back(q * m + a);
        second.push_back(q * m + b);
      }
  auto take = [](const typename P::Share& t, const std::vector<std::size_t>& at) {
    return P::apply(t, [&](const RingTensor& r) { return ring_take_last(r, at); });
  };
  return p.sub(take(xs, first), take(xs, second));
}
}  // namespace detail

namespace detail {
// Elements at positions `at` of the last axis.
template <Protocol P, class S>
S take_last(const S& t, const std::vector<std::size_t>& at) {
  return P::apply(t, [&](const RingTensor& r) { return ring_take_last(r, at); });
}

// A level of pairs by the difference (tournament_difference_level_rounds):
// xs, is (..., 2 groups) -> each pair's larger value and its index (the
// lower index on ties, as the other ways).
template <Protocol P>
Task<std::pair<typename P::Share, typename P::Share>> pair_level_by_difference(P& p, const typename P::Share& xs,
                                                                              const typename P::Share& is,
                                                                              bool with_index, int width,
                                                                              bool arithmetic) {
  const std::size_t groups = P::shape(xs).back() / 2;
  std::vector<std::size_t> first(groups), second(groups);
  for (std::size_t q = 0; q < groups; ++q) {
    first[q] = 2 * q;
    second[q] = 2 * q + 1;
  }
  const auto a = take_last<P>(xs, first);
  const auto d = p.sub(a, take_last<P>(xs, second));  // x_a - x_b
  const auto ia = with_index ? take_last<P>(is, first) : typename P::Share{};
  const auto di = with_index ? p.sub(ia, take_last<P>(is, second)) : typename P::Share{};
  if (arithmetic) {
    const auto b_wins = co_await msb(p, d, width);  // x_a < x_b, as a ring 0/1
    if (!with_index) {
      auto v = p.sub(a, co_await p.mul(b_wins, d));
      co_return std::pair{v, v};
    }
    const auto picked = co_await p.mul(concat_last<P>(b_wins, b_wins), concat_last<P>(d, di));
    co_return std::pair{p.sub(a, slice_last<P>(picked, 0, groups)), p.sub(ia, slice_last<P>(picked, groups, 2 * groups))};
  }
  const auto b_wins = co_await msb_bits(p, d, width);  // x_a < x_b
  if (!with_index) {
    auto v = p.sub(a, co_await bit_times(p, b_wins, d));
    co_return std::pair{v, v};
  }
  // Both products in one bit_dot: the bits twice, over [d, di].
  const Shape shape = P::shape(d);
  const std::size_t total = x_rows(shape) * groups;
  auto twice = P::apply(reshape<P>(b_wins, {1, total}), [](const RingTensor& t) { return ring_concat_last(t, t); });
  const auto both = concat_last<P>(reshape<P>(d, {1, total}), reshape<P>(di, {1, total}));
  auto picked = co_await bit_times(p, twice, both);  // (1, 2 total)
  auto v = p.sub(a, reshape<P>(slice_last<P>(picked, 0, total), shape));
  auto i = p.sub(ia, reshape<P>(slice_last<P>(picked, total, 2 * total), shape));
  co_return std::pair{std::move(v), std::move(i)};
}
}  // namespace detail

template <Protocol P>
Task<typename P::Bits> group_win_bits(P& p, const typename P::Share& xs, std::size_t m, int width = ring_bits) {
  const std::size_t padded = P::shape(xs).back(), groups = padded / m, pairs = groups * m * (m - 1) / 2;
  // Bit 0: x_a < x_b, i.e. b beats a (a beats b on ties: lower index).
  const auto difference = detail::pair_differences(p, xs, m);
  auto sign = co_await msb_bits(p, difference, width);
  // Candidate a's word: bit t says whether a beats its t-th opponent.
  const std::size_t per = m * (m - 1) / 2;
  auto words = P::apply(sign, [&](const RingTensor& s) {
    Shape out_shape = shape_of(s);
    out_shape.back() = padded;
    RingTensor out = ring_zeros(out_shape);
    const std::size_t rows = s.size() / pairs;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t q = 0; q < groups; ++q) {
        std::size_t k = 0;
        std::vector<std::size_t> slot(m, 0);
        for (std::size_t a = 0; a < m; ++a)
          for (std::size_t b = a + 1; b < m; ++b, ++k) {
            const Ring bit = s.data()[r * pairs + q * per + k] & 1;
            out.data()[r * padded + q * m + a] ^= bit << slot[a]++;  // a beats b: NOT bit (below)
            out.data()[r * padded + q * m + b] ^= bit << slot[b]++;  // b beats a: bit
          }
      }
    return out;
  });
  // Flip the literals "a beats b" for a < b, and set the bits above m - 1.
  RingTensor pattern = ring_zeros(P::shape(words));
  {
    const int and_width = std::max<int>(1, static_cast<int>(m) - 1);
    std::vector<Ring> per_candidate(m, 0);
    for (std::size_t a = 0; a < m; ++a) {
      Ring w = ~Ring{0} << and_width;
      for (std::size_t t = 0; t < m - 1 - a; ++t) w |= Ring{1} << (a + t);  // slots a.. are opponents b > a
      per_candidate[a] = w;
    }
    for (std::size_t i = 0; i < pattern.size(); ++i) pattern.data()[i] = per_candidate[(i % padded) % m];
  }
  auto literals = p.bits_xor_public(words, pattern);
  co_return co_await and_low_bits(p, std::move(literals), std::max<int>(1, static_cast<int>(m) - 1));
}

// The same as arithmetic 0/1 (B2A: 2 rounds more).
template <Protocol P>
Task<typename P::Share> group_wins(P& p, const typename P::Share& xs, std::size_t m, int width = ring_bits) {
  co_return co_await p.bit_to_arith(co_await group_win_bits(p, xs, m, width));
}

// x (..., len) padded to whole groups of m with `fill`.
template <Protocol P>
typename P::Share pad_to_groups(const P& p, const typename P::Share& x, std::size_t m, Ring fill) {
  const Shape shape = P::shape(x);
  const std::size_t len = shape.back(), padded = (len + m - 1) / m * m;
  if (padded == len) return x;
  Shape pad = shape;
  pad.back() = padded - len;
  return concat_last<P>(x, public_share(p, x, ring_filled(pad, fill)));
}

// The padding of a tournament's values: below every value yet within
// comparison range of all, |x| < 2^(width-2).
inline Ring tournament_floor(int width) { return static_cast<Ring>(-(std::int64_t{1} << std::min(width - 2, 61))); }

// Each group's winner's value, (..., groups * m) -> (..., groups): the
// winners' bits select with bit_dot, one group per row (B2A fused with the
// selecting product, 2 rounds).
template <Protocol P>
Task<typename P::Share> group_select(P& p, const typename P::Bits& wins, const typename P::Share& xs, std::size_t m) {
  Shape out_shape = P::shape(xs);
  const std::size_t groups = out_shape.back() / m, total = x_rows(out_shape) * groups;
  out_shape.back() = groups;
  auto v = co_await p.bit_dot(reshape<P>(wins, {total, m}), reshape<P>(xs, {total, m}));
  co_return reshape<P>(v, out_shape);
}

// Arithmetic 0/1 per element of xs (..., groups * m): 1 for the winner of
// its group, by counting wins (the top of this file): two arithmetic signs.
template <Protocol P>
Task<typename P::Share> group_wins_by_counts(P& p, const typename P::Share& xs, std::size_t m, int width) {
  const std::size_t padded = P::shape(xs).back(), groups = padded / m, pairs = groups * m * (m - 1) / 2;
  const auto difference = detail::pair_differences(p, xs, m);
  // [x_a < x_b]: b beats a. Only their sums' low bits are compared (below),
  // so the signs are needed mod 2^tournament_count_width(m) only.
  const auto below = co_await msb(p, difference, width, tournament_count_width(m));
  // t_a = (wins of a) - (m - 1) = sum_{b<a} [x_b < x_a] - sum_{b>a} [x_a < x_b] - a.
  auto signed_wins = P::apply(below, [&](const RingTensor& s) {
    Shape out_shape = shape_of(s);
    out_shape.back() = padded;
    RingTensor out = ring_zeros(out_shape);
    const std::size_t rows = s.size() / std::max<std::size_t>(pairs, 1);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t q = 0, k = 0; q < groups; ++q)
        for (std::size_t a = 0; a < m; ++a)
          for (std::size_t b = a + 1; b < m; ++b, ++k) {
            const Ring d = s.data()[r * pairs + k];
            out.data()[r * padded + q * m + a] -= d;
            out.data()[r * padded + q * m + b] += d;
          }
    return out;
  });
  RingTensor minus_slot = RingTensor::from_shape(P::shape(xs));
  for (std::size_t i = 0; i < minus_slot.size(); ++i) minus_slot.data()[i] = Ring{0} - (i % padded) % m;
  const auto t = p.add_public(signed_wins, minus_slot);
  const auto lost = co_await msb(p, t, tournament_count_width(m));  // 0 for the winner alone
  co_return p.add_public(p.neg(lost), ring_filled(P::shape(xs), 1));
}

// One level: groups of m adjacent elements (the last group padded with
// public minimal values that never win) -> their maxima and indices.
template <Protocol P>
Task<std::pair<typename P::Share, typename P::Share>> group_level(P& p, const typename P::Share& x,
                                                                 const typename P::Share& idx,
                                                                 TournamentLevel level, bool with_index, int width) {
  const std::size_t m = level.m;
  const Shape shape = P::shape(x);
  const std::size_t groups = (shape.back() + m - 1) / m;
  const auto xs = pad_to_groups(p, x, m, tournament_floor(width));
  const auto is = with_index ? pad_to_groups(p, idx, m, Ring{0}) : idx;
  if (level.by_difference && m == 2)
    co_return co_await detail::pair_level_by_difference(p, xs, is, with_index, width, level.arithmetic);
  if (level.by_counts) {
    // The winner's 0/1 times values (and indices), summed per group: one product.
    const std::size_t total = x_rows(shape) * groups;
    Shape out_shape = shape;
    out_shape.back() = groups;
    const Shape flat{1, total * m};
    const auto win = reshape<P>(co_await group_wins_by_counts(p, xs, m, width), flat);
    const auto weights = with_index ? concat_last<P>(win, win) : win;
    const auto values = with_index ? concat_last<P>(reshape<P>(xs, flat), reshape<P>(is, flat)) : reshape<P>(xs, flat);
    const std::size_t parts = with_index ? 2 : 1;
    const auto picked = reshape<P>(co_await p.mul(weights, values), {parts * total, m});
    const auto row = reshape<P>(sum_last<P>(picked), {1, parts * total});
    const auto v = reshape<P>(slice_last<P>(row, 0, total), out_shape);
    if (!with_index) co_return std::pair{v, v};  // indices unused
    co_return std::pair{v, reshape<P>(slice_last<P>(row, total, 2 * total), out_shape)};
  }
  auto wins = co_await group_win_bits(p, xs, m, width);
  if (!with_index) {
    auto v = co_await group_select(p, wins, xs, m);
    co_return std::pair{v, v};  // indices unused
  }
  // Values and indices in one bit_dot (the bits twice).
  const std::size_t total = x_rows(shape) * groups;  // groups over all rows
  Shape out_shape = shape;
  out_shape.back() = groups;
  const Shape flat{1, total * m};
  auto twice = P::apply(reshape<P>(wins, flat), [](const RingTensor& t) { return ring_concat_last(t, t); });
  auto both = co_await p.bit_dot(reshape<P>(twice, {2 * total, m}),
                                 reshape<P>(concat_last<P>(reshape<P>(xs, flat), reshape<P>(is, flat)), {2 * total, m}));
  auto row = reshape<P>(both, {1, 2 * total});
  co_return std::pair{reshape<P>(slice_last<P>(row, 0, total), out_shape),
                      reshape<P>(slice_last<P>(row, total, 2 * total), out_shape)};
}

// arity 0: each level's group size from tournament_plan; otherwise every
// level uses groups of `arity` (2 is the classic pairwise tournament).
// width < 64 narrows the comparisons: the caller promises
// |x| < 2^(width-2) as ring integers (padding stays below every value).
// plan_rows > 0: plan for that many rows (a caller running several
// tournaments at once, whose messages share rounds, plans on all of
// their rows; the plan changes only the cost, not the result).
template <Protocol P>
Task<ArgMax<P>> argmax_last(P& p, typename P::Share x, bool with_index = true, std::size_t arity = 0,
                            int width = ring_bits, std::size_t plan_rows = 0) {
  Shape shape = P::shape(x);
  if (shape.empty() || shape.back() == 0)
    throw Error(ErrorCode::invalid_argument,
                "argmax over an empty last axis, shape " + shape_string(shape));
  if (width < 3 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument, "argmax: comparison width " + std::to_string(width) +
                                                 " is outside [3, 64]");
  const std::size_t n = shape.back();
  if constexpr (ExactReals<P>) {
    auto [value, index] = p.exact_argmax_last(x);
    co_return ArgMax<P>{std::move(value), std::move(index)};
  }
  // The indices only where asked for (a max over a prefill's scores would
  // hold 24 bytes a score more at its peak).
  RingTensor iota = RingTensor::from_shape(with_index ? shape : Shape{1, 1});
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % n;
  typename P::Share idx = public_share(p, x, iota);
  std::vector<TournamentLevel> plan;
  const std::size_t rows = plan_rows > 0 ? plan_rows : x_rows(shape);
  if (arity == 0) plan = with_costs(p, [&]<CostModel C>() { return tournament_levels<C>(rows, n, width); });
  for (std::size_t level = 0; P::shape(x).back() > 1; ++level) {
    TournamentLevel step = arity != 0 ? TournamentLevel{arity} : plan.at(level);
    step.m = std::min(step.m, P::shape(x).back());
    if (arity != 0) {
      const std::size_t groups = x_rows(shape) * ((P::shape(x).back() + step.m - 1) / step.m);
      step.by_counts = with_costs(p, [&]<CostModel C>() { return tournament_counts_at<C>(step.m, groups, width); });
    }
    auto [v, i] = co_await group_level(p, x, idx, step, with_index, width);
    x = std::move(v);
    idx = std::move(i);
  }
  co_return ArgMax<P>{std::move(x), std::move(idx)};
}

// The index of a one-hot row (..., n) -> (...): the local sum of i * one_hot_i
// (with argmax_onehot_last, a chosen token's id without another round).
template <Protocol P>
typename P::Share one_hot_index(const typename P::Share& one_hot) {
  const std::size_t n = P::shape(one_hot).back();
  std::vector<Ring> iota(n);
  for (std::size_t i = 0; i < n; ++i) iota[i] = i;
  return P::apply(one_hot, [&](const RingTensor& t) { return ring_weighted_sum_last(t, iota); });
}

template <Protocol P>
Task<typename P::Share> max_last(P& p, typename P::Share x, std::size_t arity = 0, int width = ring_bits,
                                 std::size_t plan_rows = 0) {
  auto r = co_await argmax_last(p, std::move(x), false, arity, width, plan_rows);  // r.index unused
  co_return std::move(r.value);
}

// An upper bound m of each row's max M, M <= m <= M + 3 2^(drop - f)
// (..., n) -> (..., 1), for a shift that only needs m >= M (softmax): the
// tournament compares and carries floor(x / 2^drop) (coarse_components,
// compare.cppm: each value off by e in [0, 2], exact modulo 2^(64 - drop)), so
// its comparisons need 64 - drop bits, not 64 (at drop 14: 50 bits, 12.3
// bytes a comparison on rss3's circuit where 64 take 15.6, the same 6
// rounds). The winner C times 2^drop is a clean sharing again (the wrap's
// multiples of 2^(64 - drop) vanish), and m = (C + 3) 2^drop.
// Requires |x| < 2^62 as ring integers (as exact truncation does).
template <Protocol P>
Task<typename P::Share> max_upper_last(P& p, const typename P::Share& x, int drop, std::size_t plan_rows = 0) {
  if constexpr (ExactReals<P>) {
    co_return co_await max_last(p, x);
  } else {
    auto top = co_await max_last(p, coarse_components<P>(x, drop, "max_upper_last"), 0, ring_bits - drop, plan_rows);
    const Shape s = P::shape(top);
    top = p.mul_public(top, ring_filled(s, Ring{1} << drop));
    co_return p.add_public(top, ring_filled(s, Ring{3} << drop));
  }
}

}  // namespace mpcache::ops
