// scale * x^e for positive x (1/x: e = -1; 1/sqrt(x): e = -1/2) in one
// product after x's comparisons, where truncation is exact
// (detail::octave_power_pays). Below with an arithmetic one-hot (rss3 dcf);
// on a boolean one (the circuit's msb_bits, then bit_dot: B2A fused with
// the product) for at most octave_bits_max_values values, the same steps:
//   1. pieces: x < c_j for the starts c_j = 2^(T + k/P) of P pieces per
//      octave (T over the range's bit positions, k < P), one batch of
//      msb_arith (2 rounds); one_hot_j = [c_j <= x < c_{j+1}] locally;
//   2. meanwhile, x and x^2 at a few scales (groups of positions): Z = x
//      truncated by sigma, then Y = Z^2 truncated by rho (2 rounds), so that
//      every position has both with 2^-19 relative precision and no wrap;
//   3. on piece j, x^e = c_j^e (x / c_j)^e ~ c_j^e q(v) with v = x / c_j in
//      [1, 2^(1/P)) and q one quadratic for all pieces (scale invariance):
//      a_j + b_j Z + d_j Y with public per-piece weights, and one dot_trunc
//      per group sums o_j (a_j + b_j Z + d_j Y): 1 round.
// The one-hot is 0 below the range (the result is 0 there) and marks the
// top piece above it (extrapolated).
// Reciprocals and norms thus take 3 rounds where normalising x (x' by a
// dot_trunc) and then a polynomial or series in x' took 6 (rss3 dcf): the
// squares form beside the comparisons, and the pieces make a quadratic
// enough.
//   cost: msb_arith over (range's octaves) P comparisons of (high + 1) bits;
//     per group a truncation (where sigma > 0) and a square of (..., 1),
//     and a dot_trunc over the group's pieces; 3 rounds (tested)
//   error: q's relative error (octave_reciprocal, octave_rsqrt below) plus
//     2^-19 relative from Z and Y, plus an ulp or two of the result per
//     group (tested against 2 per group)
export module mpcache.ops:octaves;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;

export namespace mpcache::ops {

// x^exponent on P = per_octave pieces per octave: q(v) = c0 + c1 v + c2 v^2
// ~ v^exponent on [1, 2^(1/P)), the relative minimax quadratic (Lawson's
// iteration on weighted least squares over Chebyshev nodes), with its
// largest relative error.
struct OctavePower {
  double exponent;
  int per_octave;
  std::array<double, 3> quadratic;
  double relative_error;
};
inline constexpr OctavePower octave_reciprocal{
    -1.0, 8, {2.8728097231529754, -2.749720947426916, 0.8768909074826261}, 2.03e-5};
inline constexpr OctavePower octave_rsqrt{
    -0.5, 4, {1.7957166468278214, -1.096497394152402, 0.3007299952290707}, 5.08e-5};

namespace detail {
// Positions [first, end) of x's ring value share Z = x >> shift and
// Y = Z^2 >> square_shift, and one dot_trunc by dot_shift.
struct OctaveGroup {
  int first = 0, end = 0;
  int shift = 0, square_shift = 0, dot_shift = 0;
};

// x (a ring integer at 2^frac_bits) in [2^low, 2^high) cut into pieces.
struct OctavePlan {
  int frac_bits = 0;
  int low = 0, high = 0;
  std::vector<double> starts;     // c_j as real ring values
  std::vector<Ring> thresholds;   // ceil(c_j): x < ceil(c_j) iff x < c_j
  std::vector<OctaveGroup> groups;
  int position_of(std::size_t piece, int per_octave) const { return low + static_cast<int>(piece) / per_octave; }
  // The pieces of a group of positions [first, end): [first_piece, end_piece).
  std::pair<std::size_t, std::size_t> pieces_of(const OctaveGroup& g, int per_octave) const {
    return {static_cast<std::size_t>((g.first - low) * per_octave), static_cast<std::size_t>((g.end - low) * per_octave)};
  }
};

// The product of a group's largest Z with itself stays below 2^62.
inline constexpr int octave_square_bits = 31;
// Z and Y keep this many bits or more (2^-19 relative).
inline constexpr int octave_kept_bits = 19;
// The dot's terms stay below 2^59 (exact truncation needs |v| < 2^62; the
// quadratic's terms reach a few times the result).
inline constexpr int octave_sum_bits = 59;

// A group of w positions: its top weights (Y up to 2^(19 + 2w) against
// results down to 2^(e w) of its largest) keep 2^-20: w (2 + |e|) <= 21.
inline int octave_group_width(double exponent) {
  return std::max(1, static_cast<int>(21.0 / (2.0 + std::abs(exponent))));
}

// The plan for scale * x^e with x at 2^frac_bits in [2^min_log2, 2^max_log2)
// (real) and the result at 2^out_bits.
inline OctavePlan octave_plan(const OctavePower& power, int frac_bits, int min_log2, int max_log2, double scale,
                              int out_bits) {
  OctavePlan plan;
  plan.frac_bits = frac_bits;
  plan.low = frac_bits + min_log2;
  plan.high = frac_bits + max_log2;
  if (plan.low < 0 || plan.high <= plan.low || plan.high > 60)
    throw Error(ErrorCode::invalid_argument, "octave pieces over ring bits [" + std::to_string(plan.low) + ", " +
                                                 std::to_string(plan.high) + "): outside [0, 60]");
  const int P = power.per_octave;
  for (int T = plan.low; T < plan.high; ++T)
    for (int k = 0; k < P; ++k) {
      const double c = std::exp2(T + static_cast<double>(k) / P);
      plan.starts.push_back(c);
      plan.thresholds.push_back(static_cast<Ring>(std::ceil(c)));
    }
  const int w = octave_group_width(power.exponent);
  for (int first = plan.low; first < plan.high; first += w) {
    OctaveGroup g;
    g.first = first;
    g.end = std::min(first + w, plan.high);
    g.shift = std::max(0, g.end - octave_square_bits);
    g.square_shift = std::max(0, 2 * (first - g.shift) - octave_kept_bits);
    // The largest result of the group: at its smallest x (e < 0).
    const double largest = std::log2(std::abs(scale)) + power.exponent * (first - frac_bits);
    // Beyond Y's bits + 1, a wider shift adds no precision to the result (the
    // weights' rounding is then below a quarter ulp): groups of small
    // results share that shift, so fewer stores of truncation pairs.
    const int enough = octave_kept_bits + 2 * w + 1;
    g.dot_shift = std::min(enough, static_cast<int>(std::floor(octave_sum_bits - out_bits - largest)));
    if (g.dot_shift < 0)
      throw Error(ErrorCode::invalid_argument, "octave pieces: results near " + std::to_string(std::exp2(largest)) +
                                                   " at 2^" + std::to_string(out_bits) + " leave no room");
    plan.groups.push_back(g);
  }
  return plan;
}

// A group's weights (a_j, b_j, d_j) on its own pieces (OctavePlan::pieces_of):
// scale c_j^e q(x / c_j) = a_j + b_j Z + d_j Y at 2^(out_bits + dot_shift).
struct OctaveWeights {
  std::vector<Ring> constant, linear, square;
};

inline OctaveWeights octave_weights(const OctavePlan& plan, const OctaveGroup& g, const OctavePower& power,
                                    double scale, int out_bits) {
  const auto [begin, end] = plan.pieces_of(g, power.per_octave);
  OctaveWeights w;
  const auto& q = power.quadratic;
  auto ring = [](double v) { return static_cast<Ring>(std::llround(v)); };
  for (std::size_t j = begin; j < end; ++j) {
    const double c = plan.starts[j];
    const double at_start = std::ldexp(scale * std::pow(std::ldexp(c, -plan.frac_bits), power.exponent),
                                       out_bits + g.dot_shift);
    w.constant.push_back(ring(at_start * q[0]));
    w.linear.push_back(ring(at_start * q[1] * std::ldexp(1.0, g.shift) / c));
    w.square.push_back(ring(at_start * q[2] * std::ldexp(1.0, 2 * g.shift + g.square_shift) / (c * c)));
  }
  return w;
}

// Values (rows) up to which octave pieces serve on a boolean one-hot (the
// circuit's msb_bits, then bit_dot): each value compares 4 to 8 times more
// than the normalisation does, at about 55 bits, so a decode step's few norm
// rows and softmax sums gain their rounds for some hundred kB, while a long
// prefill's rows would pay hundreds of MB for the same rounds.
inline constexpr std::size_t octave_bits_max_values = 256;

// Whether octave_power takes an arithmetic one-hot: where the cost model
// prefers it for that many comparisons (rss3 dcf).
template <Protocol P>
bool octave_arithmetic(const P& p, const typename P::Share& x, const OctavePlan& plan) {
  if constexpr (ArithmeticOneHot<P>) {
    const std::size_t values = element_count(P::shape(x));
    const std::size_t pieces = plan.thresholds.size();
    return arithmetic_select_pays(p, plan.high + 1, values * pieces, values, pieces);
  } else {
    return false;
  }
}

// Whether octave_power should serve here: exact truncation (its squares and
// dot sums reach 2^59), and an arithmetic one-hot (octave_arithmetic) or few
// enough values for a boolean one (octave_bits_max_values).
template <Protocol P>
bool octave_power_pays(const P& p, const typename P::Share& x, const OctavePlan& plan) {
  if (!truncates_exactly(p)) return false;
  return octave_arithmetic(p, x, plan) || element_count(P::shape(x)) <= octave_bits_max_values;
}

// The pieces' one-hot and the dots of octave_power, on a ring 0/1 one-hot
// (msb_arith, dot_trunc: 1 round) or a boolean one (msb_bits, bit_dot: B2A
// fused with the product, 2 rounds on rss3).
template <class P, bool arithmetic>
struct OctaveOneHot {
  using Hot = std::conditional_t<arithmetic, typename P::Share, typename P::Bits>;
  static Task<Hot> pieces(P& q, const typename P::Share& x, const OctavePlan& plan) {
    const std::size_t n = plan.thresholds.size();
    if constexpr (arithmetic) {
      const auto below = co_await below_each(q, x, plan.thresholds, plan.high + 1);
      const auto hot = adjacent_combined<P>(below, n, [](Ring above, Ring at) { return above - at; });
      co_return q.add_public(hot, top_is_one(P::shape(below), n));
    } else {
      const auto below = co_await below_each_bits(q, x, plan.thresholds, plan.high + 1);
      const auto hot = adjacent_combined<P>(below, n, [](Ring above, Ring at) { return above ^ at; });
      co_return q.bits_xor_public(hot, top_is_one(P::shape(below), n));
    }
  }
  static Task<typename P::Share> dot(P& q, const Hot& hot, const typename P::Share& values, int bits) {
    if constexpr (arithmetic) co_return co_await q.dot_trunc(hot, values, bits);
    else co_return co_await q.bit_dot(hot, values, bits);
  }
};

// scale * x^e (x (..., 1) at 2^plan.frac_bits) at 2^out_bits, by the plan
// (octave_plan with the same power, scale and out_bits): 3 rounds on an
// arithmetic one-hot; on a boolean one, msb_bits + bit_dot.
template <Protocol P, bool arithmetic>
Task<typename P::Share> octave_power_with(P& p, const typename P::Share& x, const OctavePlan& plan,
                                          const OctavePower& power, double scale, int out_bits) {
  using Share = typename P::Share;
  using OneHot = OctaveOneHot<P, arithmetic>;
  auto pieces = [&](P& q) { return OneHot::pieces(q, x, plan); };
  // Z and Y of one group: its truncation (if any), then its square.
  auto powers_of = [&](P& q, const OctaveGroup& g) -> Task<std::pair<Share, Share>> {
    Share z = g.shift > 0 ? co_await q.truncate(x, g.shift) : x;
    Share y = co_await q.mul_trunc(z, z, g.square_shift);
    co_return std::pair{std::move(z), std::move(y)};
  };
  auto all_powers = [&](P& q) -> Task<std::vector<std::pair<Share, Share>>> {
    std::vector<P> forks;
    std::vector<Task<std::pair<Share, Share>>> tasks;
    for (std::size_t g = 0; g < plan.groups.size(); ++g) forks.push_back(q.fork());
    for (std::size_t g = 0; g < plan.groups.size(); ++g) tasks.push_back(powers_of(forks[g], plan.groups[g]));
    co_return co_await when_all(std::move(tasks));
  };
  P pc = p.fork(), pz = p.fork();
  auto [hot, powers] = co_await when_all(pieces(pc), all_powers(pz));
  // Each group's dot covers its own pieces only (the others' terms are 0):
  // a boolean dot's bytes grow with its terms. The slices and values must
  // outlive the dots, which start inside when_all.
  std::vector<typename OneHot::Hot> hots;
  std::vector<Share> values;
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const auto [begin, end] = plan.pieces_of(plan.groups[g], power.per_octave);
    hots.push_back(P::apply(hot, [begin, end](const RingTensor& t) { return ring_slice_last(t, begin, end); }));
    const auto w = octave_weights(plan, plan.groups[g], power, scale, out_bits);
    const auto& [z, y] = powers[g];
    const Shape s = P::shape(x);
    const std::size_t k = end - begin;
    values.push_back(p.add_public(p.add(p.mul_public(repeat_last<P>(z, k), tiled_last(s, w.linear)),
                                        p.mul_public(repeat_last<P>(y, k), tiled_last(s, w.square))),
                                  tiled_last(s, w.constant)));
  }
  std::vector<P> forks;
  std::vector<Task<Share>> dots;
  for (std::size_t g = 0; g < plan.groups.size(); ++g) forks.push_back(p.fork());
  for (std::size_t g = 0; g < plan.groups.size(); ++g)
    dots.push_back(OneHot::dot(forks[g], hots[g], values[g], plan.groups[g].dot_shift));
  auto sums = co_await when_all(std::move(dots));
  Share total = std::move(sums.front());
  for (std::size_t g = 1; g < sums.size(); ++g) total = p.add(total, sums[g]);
  co_return reshape<P>(total, P::shape(x));
}

template <Protocol P>
Task<typename P::Share> octave_power(P& p, const typename P::Share& x, const OctavePlan& plan,
                                     const OctavePower& power, double scale, int out_bits) {
  if constexpr (ArithmeticOneHot<P>)
    if (octave_arithmetic(p, x, plan)) co_return co_await octave_power_with<P, true>(p, x, plan, power, scale, out_bits);
  co_return co_await octave_power_with<P, false>(p, x, plan, power, scale, out_bits);
}
}  // namespace detail

}  // namespace mpcache::ops
