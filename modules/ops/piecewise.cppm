// Piecewise polynomials, the PUMA way of computing activations: all segment
// comparisons in one batched A2B, all polynomial pieces concurrently, then
// the segment indicators (boolean: adjacent comparison bits XORed, locally)
// select the pieces in one bit_dot (B2A fused with the products).
// Where the backend has an arithmetic sign and its cost model says so
// (rss3 dcf, detail::arithmetic_select_pays), the comparisons are msb_arith
// (ring 0/1), the indicators differences of adjacent ones, and the select
// one dot_trunc: a product's round where bit_dot took two.
// A polynomial piece is fitted in t = (x - center) / half_width, t in [-1, 1],
// so that coefficient rounding (2^-(f+1) each) costs at most sum|c| 2^-(f+1).
// Where many elements make bytes cost more than rounds (on the LAN: a
// prefill's MLP; detail::selecting_first_pays), piecewise_selected
// evaluates one polynomial per element instead of every piece: the
// comparisons first, then each element's piece's coefficients, selected
// locally, weigh the powers of its own t. About half the bytes, 5 rounds more.
//   cost (rss3): max(msb_bits: 6 at 64 bits, 2 + ceil(log2 degree)) + 2 rounds;
//   rss3 dcf: max(msb_arith: 2, 2 + ceil(log2 degree)) + 1; where truncation
//   is exact the polynomials of degree >= 3 take ceil(log2 degree)
//   (polynomial, below)
export module mpcache.ops:piecewise;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;
import :compare;

export namespace mpcache::ops {

struct Piece {
  enum class Kind { zero, identity, polynomial } kind = Kind::zero;
  double center = 0;
  double half_width = 1;
  std::vector<double> coefficients;  // in t, lowest degree first
};

struct Piecewise {
  std::vector<double> breakpoints;  // ascending; piece i covers [b_{i-1}, b_i)
  std::vector<Piece> pieces;        // breakpoints.size() + 1
};

namespace detail {
// Fraction bits for the coefficients of a polynomial whose last round is
// folded (below): its product reaches sum|c_k| 2^(2f + G) on t in [-1, 1],
// kept below 2^60; 0 (do not fold) where that leaves fewer than 8.
inline int folded_coefficient_bits(const Piece& piece, int frac_bits) {
  double total = 0;
  for (double c : piece.coefficients) total += std::fabs(c);
  const int bits = std::min(frac_bits, 60 - 2 * frac_bits - static_cast<int>(std::ceil(std::log2(total + 1))));
  return bits >= 8 ? bits : 0;
}

// t^2 straight from x (polynomial, below) reaches t^2 2^60 before its
// truncation (in range, |t| <= 1), with 1/h^2 at 60 - 2f >= f fraction
// bits where f <= 20. Out of range it may wrap; that piece's indicator is
// 0 there.
inline bool square_beside_t_fits(int frac_bits) { return 3 * frac_bits <= 60; }

// One level of log-depth powers: power[k] for k in (known, upto], each
// power[known] power[k - known], concurrently (one round).
template <Protocol P>
Task<void> next_powers(P& p, std::vector<typename P::Share>& power, std::size_t known, std::size_t upto) {
  std::vector<P> forks;
  std::vector<Task<typename P::Share>> products;
  for (std::size_t k = known + 1; k <= upto; ++k) forks.push_back(p.fork());
  for (std::size_t k = known + 1; k <= upto; ++k)
    products.push_back(forks[k - known - 1].mul_trunc(power[known], power[k - known]));
  auto results = co_await when_all(std::move(products));
  for (std::size_t k = known + 1; k <= upto; ++k) power[k] = std::move(results[k - known - 1]);
}

// Whether splines of degree-4 pieces (more breakpoints, 2 rounds per piece)
// pay against a few high-degree pieces for x's values: where truncation is
// exact (the pieces' t^2 beside t) and comparisons are one-round DCFs with
// an arithmetic one-hot (rss3 dcf), extra breakpoints cost a little
// offline key material and 8 bytes online each; on the circuit each is a
// 64-bit msb_bits, and the old pieces stay.
template <Protocol P>
bool splines_pay(const P& p, const typename P::Share& x) {
  if (!truncates_exactly(p) || !square_beside_t_fits(p.frac_bits())) return false;
  if constexpr (ArithmeticOneHot<P>) {
    const std::size_t values = element_count(P::shape(x));
    return arithmetic_select_pays(p, ring_bits, values, values, 2);
  } else {
    return false;
  }
}
}  // namespace detail

// c_0 + c_1 t + ... for t = (x - center) / half_width: t, then its powers in
// log depth, then one truncation of the weighted sum. Where truncation is
// exact (truncates_exactly) the round that would fill the top powers
// t^(m+1..d) instead multiplies t^m by sum_{k>m} c_k t^(k-m) while the
// lower terms are truncated: the sum's own truncation round goes; and t^2
// is formed from x beside t's truncation, which would otherwise be a round
// alone (probabilistic truncation hides it in party 0's message).
template <Protocol P>
Task<typename P::Share> polynomial(P& p, const typename P::Share& x, const Piece& piece) {
  const Shape s = P::shape(x);
  const int f = p.frac_bits();
  const FixedPoint fp(f);
  const double scale = fp.scale();
  const std::size_t degree = piece.coefficients.size() - 1;
  std::vector<typename P::Share> power(degree + 1);
  const int folded_bits = degree >= 2 && truncates_exactly(p) ? detail::folded_coefficient_bits(piece, f) : 0;
  std::size_t known = 1;
  if (folded_bits > 0 && degree >= 3 && detail::square_beside_t_fits(f)) {
    // t's truncation would be a round alone: t^2 = (x - center)^2 / h^2
    // comes from x in the same round. 1/h and 1/h^2 carry W = 60 - 2f
    // fraction bits, so that t and t^2 agree to about 2^-W: each power's
    // error weighs with its coefficient, and sum |c_k| reaches 21 (GeLU).
    const int wide = 60 - 2 * f;
    const FixedPoint fine(wide);
    const double h = piece.half_width;
    const auto centered = p.add_public(x, ring_filled(s, fp.encode(-piece.center)));
    const auto t_fine = p.mul_public(centered, ring_filled(s, fine.encode(1.0 / h)));
    const auto square_factor = p.mul_public(centered, ring_filled(s, fine.encode(1.0 / (h * h))));
    P ps = p.fork();  // the truncation alone on p, as the folded sum's below
    auto [t, t2] = co_await when_all(p.truncate(t_fine, wide), ps.mul_trunc(square_factor, centered, f + wide));
    power[1] = std::move(t);
    power[2] = std::move(t2);
    known = 2;
  } else {
    // t = trunc(x / h - center / h at scale 2^(2f)).
    auto t_wide = p.add_public(
        p.mul_public(x, ring_filled(s, fp.encode(1.0 / piece.half_width))),
        ring_filled(s, static_cast<Ring>(static_cast<std::int64_t>(
                           std::llround(-piece.center / piece.half_width * scale * scale)))));
    power[1] = co_await p.truncate(t_wide, f);
  }
  // Log-depth powers: round r fills (known, 2 known] from products of known ones.
  for (; known < degree; known *= 2) {
    if (folded_bits > 0 && 2 * known >= degree) break;  // the last round, folded below
    co_await detail::next_powers(p, power, known, std::min(degree, 2 * known));
  }
  if (folded_bits > 0) {
    const int g = folded_bits;
    const std::span<const typename P::Share> powers(power);
    const std::span<const double> c(piece.coefficients);
    const auto low_sum = p.add_public(weighted_terms<P>(p, powers.subspan(1, known), c.subspan(1, known), g),
                                      ring_filled(s, FixedPoint(f + g).encode(c[0])));
    const auto high_factor = weighted_terms<P>(p, powers.subspan(1, degree - known), c.subspan(known + 1), g);
    // The truncation alone on p itself, the product on a burst's first fork
    // (half of p's truncation pairs, rss3_pairs.cppm; a truncation alone
    // needs none).
    P ph = p.fork();
    auto [low, high] = co_await when_all(p.truncate(low_sum, g), ph.mul_trunc(power[known], high_factor, f + g));
    co_return p.add(low, high);
  }
  // sum c_k t^k at scale 2^(2f), then one truncation.
  auto acc = public_share(p, x, ring_filled(s, static_cast<Ring>(static_cast<std::int64_t>(
                                                   std::llround(piece.coefficients[0] * scale * scale)))));
  for (std::size_t k = 1; k <= degree; ++k)
    acc = p.add(acc, p.mul_public(power[k], ring_filled(s, fp.encode(piece.coefficients[k]))));
  co_return co_await p.truncate(acc, f);
}

namespace detail {
// Indicators of the live pieces on a new last axis (..., J) from the
// comparisons below (..., cuts), below_j = [x < b_j]: piece j's is
// combine(below_j, below_{j-1}), with below_cuts and below_{-1} taken as 0
// here (combine is XOR for bits, a difference for ring 0/1: linear and
// component-wise, so the last piece's public 1 goes in after, top_is_one).
template <class P, class S, class Combine>
S piece_indicators(const S& below, std::size_t cuts, const std::vector<std::size_t>& live, Combine combine) {
  const std::size_t count = live.size();
  return P::apply(below, [&](const RingTensor& t) {
    Shape stacked = shape_of(t);
    stacked.back() = count;
    RingTensor out = RingTensor::from_shape(std::move(stacked));  // every element written below
    const std::size_t elements = out.size() / count;
    for (std::size_t e = 0; e < elements; ++e)
      for (std::size_t c = 0; c < count; ++c) {
        const std::size_t j = live[c];
        out.data()[e * count + c] =
            combine(j < cuts ? t.data()[e * cuts + j] : 0, j > 0 ? t.data()[e * cuts + j - 1] : 0);
      }
    return out;
  });
}

// The pieces' values side by side on a new last axis (..., c): in one pass
// where the backend applies over many shares (ApplyN), else the first c
// pieces (..., c) and the next (...) make (..., c + 1), each element copied
// once per step and no reshaped copies between.
template <Protocol P>
typename P::Share side_by_side(const std::vector<typename P::Share>& values, const Shape& s) {
  auto widen = [&s](std::size_t c) {
    return [&s, c](const RingTensor& left, const RingTensor& piece) {
      Shape shape = s;
      shape.push_back(c + 1);
      RingTensor out = RingTensor::from_shape(std::move(shape));
      for (std::size_t e = 0; e < piece.size(); ++e) {
        std::copy(left.data() + e * c, left.data() + (e + 1) * c, out.data() + e * (c + 1));
        out.data()[e * (c + 1) + c] = piece.data()[e];
      }
      return out;
    };
  };
  if constexpr (ApplyN<P>) {
    std::vector<const typename P::Share*> each;
    for (const auto& v : values) each.push_back(&v);
    return P::apply_n(std::span<const typename P::Share* const>(each), [&s](std::span<const RingTensor* const> parts) {
      const std::size_t c = parts.size();
      Shape shape = s;
      shape.push_back(c);
      RingTensor out = RingTensor::from_shape(std::move(shape));
      Ring* to = out.data();
      for (std::size_t e = 0, n = parts[0]->size(); e < n; ++e)
        for (std::size_t j = 0; j < c; ++j) *to++ = parts[j]->data()[e];
      return out;
    });
  }
  Shape column = s;
  column.push_back(1);
  typename P::Share out = values.size() == 1 ? reshape<P>(values[0], column) : P::apply2(values[0], values[1], widen(1));
  for (std::size_t c = 2; c < values.size(); ++c) out = P::apply2(out, values[c], widen(c));
  return out;
}
}  // namespace detail

namespace detail {
// A backend that sums products over the last axis at the cost of one
// product (rss3; plain, so that it computes what rss3 computes).
template <class P>
concept SumsProducts = Protocol<P> && requires(P& p, const typename P::Share& a, int bits) {
  { p.dot_trunc(a, a, bits) } -> std::same_as<Task<typename P::Share>>;
};

inline std::size_t max_degree(const Piecewise& spec) {
  std::size_t degree = 0;
  for (const Piece& piece : spec.pieces)
    if (piece.kind == Piece::Kind::polynomial) degree = std::max(degree, piece.coefficients.size() - 1);
  return degree;
}

// Piece j's value of one selected quantity, as a real: selected(...) below
// weighs the comparisons with differences of these.
struct SelectedColumn {
  enum class Of { scale, offset, coefficient, identity } of;
  std::size_t k = 0;  // the coefficient's degree
  double value(const Piece& piece) const {
    const bool poly = piece.kind == Piece::Kind::polynomial;
    switch (of) {
      case Of::scale: return poly ? 1.0 / piece.half_width : 0.0;
      case Of::offset: return poly ? -piece.center / piece.half_width : 0.0;
      case Of::coefficient: return poly && k < piece.coefficients.size() ? piece.coefficients[k] : 0.0;
      case Of::identity: return piece.kind == Piece::Kind::identity ? 1.0 : 0.0;
    }
    return 0.0;
  }
};

// (n, columns): each element's piece's value of each column, fixed point,
// from below (n, cuts), the arithmetic 0/1 of [x < b_i]. The element in
// piece j has below_i = 1 exactly for i >= j, so v_j = v_last +
// sum_i below_i (v_i - v_{i+1}): one local product with public weights.
template <Protocol P>
typename P::Share selected(const P& p, const typename P::Share& below, const Piecewise& spec,
                           const std::vector<SelectedColumn>& columns) {
  const std::size_t cuts = spec.breakpoints.size(), q = columns.size();
  const std::size_t n = P::shape(below)[0];
  const FixedPoint fp(p.frac_bits());
  std::vector<Ring> weights(cuts * q);  // [i][c]
  std::vector<Ring> last(q);
  for (std::size_t c = 0; c < q; ++c) {
    for (std::size_t i = 0; i < cuts; ++i)
      weights[i * q + c] = fp.encode(columns[c].value(spec.pieces[i])) - fp.encode(columns[c].value(spec.pieces[i + 1]));
    last[c] = fp.encode(columns[c].value(spec.pieces[cuts]));
  }
  // A (n, cuts) x (cuts, q) product with q and cuts a few: a plain loop
  // (the matmul kernel's packing costs more than the product here), its
  // inner sum unrolled for the usual cut counts.
  auto product = [&]<std::size_t K>(const RingTensor& b, std::integral_constant<std::size_t, K>) {
    const std::size_t k = K > 0 ? K : cuts;
    RingTensor out = RingTensor::from_shape({n, q});
    const Ring* row = b.data();
    Ring* to = out.data();
    for (std::size_t e = 0; e < n; ++e, row += k)
      for (std::size_t c = 0; c < q; ++c) {
        Ring sum = 0;
        for (std::size_t i = 0; i < k; ++i) sum += row[i] * weights[i * q + c];
        *to++ = sum;
      }
    return out;
  };
  const auto weighted = P::apply(below, [&](const RingTensor& b) {
    if (cuts == 3) return product(b, std::integral_constant<std::size_t, 3>{});
    if (cuts == 4) return product(b, std::integral_constant<std::size_t, 4>{});
    return product(b, std::integral_constant<std::size_t, 0>{});
  });
  return p.add_public(weighted, tiled_last(Shape{n}, last));
}
}  // namespace detail

// The same function as piecewise (below), for backends that sum products in
// one (detail::SumsProducts): the comparisons first, then one polynomial
// per element. B2A makes [x < b_i] arithmetic; each element's piece then
// gives, locally, its t = x / h - c / h (one product), its coefficients and
// its identity weight. With m = ceil(d/2) for the highest degree d:
//   t^2..t^m           log-depth products
//   low  = c_0 + c_1 t + .. + c_m t^m + [identity] x    one sum of products
//   high = c_{m+1} t + .. + c_d t^(d-m)                  one, beside it
//   f(x) = low + t^m high                                one product
// and with `times` y, t^m y beside low and high, then low y + high (t^m y)
// in one sum of products. Zero and identity pieces have t = 0, so no power
// leaves [-1, 1] and nothing wraps. Each product is that of one element,
// where piecewise pays one per piece and power; but its levels follow the
// comparisons instead of running beside them (rss3 circuit, SiLU with y:
// 13 rounds where piecewise takes 8; tested).
template <Protocol P>
  requires detail::SumsProducts<P>
Task<typename P::Share> piecewise_selected(P& p, const typename P::Share& x, const Piecewise& spec,
                                           const std::optional<typename P::Share>& times = std::nullopt,
                                           int times_shift = 0) {
  using Col = detail::SelectedColumn;
  const std::size_t cuts = spec.breakpoints.size();
  if (cuts == 0 || spec.pieces.size() != cuts + 1)
    throw Error(ErrorCode::invalid_argument, "piecewise_selected: " + std::to_string(spec.pieces.size()) +
                                                 " pieces for " + std::to_string(cuts) + " breakpoints");
  const Shape s = P::shape(x);
  const Shape flat{element_count(s)};
  const int f = p.frac_bits();
  const FixedPoint fp(f);
  const auto xf = reshape<P>(x, flat);
  std::optional<typename P::Share> yf;
  if (times) yf = reshape<P>(*times, flat);
  std::vector<Ring> breakpoints;
  for (double b : spec.breakpoints) breakpoints.push_back(fp.encode(b));
  const auto below = co_await p.bit_to_arith(co_await below_each_bits(p, xf, breakpoints));

  const std::size_t degree = detail::max_degree(spec);
  const std::size_t m = (degree + 1) / 2;
  std::vector<typename P::Share> power(m + 1);
  if (m > 0) {
    const auto scale = reshape<P>(detail::selected(p, below, spec, {Col{Col::Of::scale}}), flat);
    const auto offset = reshape<P>(detail::selected(p, below, spec, {Col{Col::Of::offset}}), flat);
    power[1] = p.add(co_await p.mul_trunc(scale, xf), offset);
  }
  for (std::size_t known = 1; known < m; known *= 2) co_await detail::next_powers(p, power, known, std::min(m, 2 * known));

  // low's terms: 1, t..t^m, x against c_0..c_m and the identity weight.
  std::vector<Col> low_columns;
  std::vector<typename P::Share> low_terms{public_share(p, xf, ring_filled(flat, fp.encode(1.0)))};
  for (std::size_t k = 0; k <= m; ++k) low_columns.push_back(Col{Col::Of::coefficient, k});
  for (std::size_t k = 1; k <= m; ++k) low_terms.push_back(power[k]);
  low_columns.push_back(Col{Col::Of::identity});
  low_terms.push_back(xf);
  const auto low_weights = detail::selected(p, below, spec, low_columns);
  const auto low_values = detail::side_by_side<P>(low_terms, flat);
  std::vector<Task<typename P::Share>> work;
  std::vector<P> forks;
  for (int i = 0; i < 2; ++i) forks.push_back(p.fork());
  work.push_back(p.dot_trunc(low_weights, low_values, f));
  std::optional<typename P::Share> high_weights, high_values;
  if (degree > m) {
    std::vector<Col> high_columns;
    std::vector<typename P::Share> high_terms;
    for (std::size_t k = m + 1; k <= degree; ++k) {
      high_columns.push_back(Col{Col::Of::coefficient, k});
      high_terms.push_back(power[k - m]);
    }
    high_weights = detail::selected(p, below, spec, high_columns);
    high_values = detail::side_by_side<P>(high_terms, flat);
    work.push_back(forks[0].dot_trunc(*high_weights, *high_values, f));
    if (yf) work.push_back(forks[1].mul_trunc(power[m], *yf));
  }
  auto done = co_await when_all(std::move(work));
  typename P::Share out;
  if (degree <= m) {
    out = yf ? co_await p.mul_trunc(done[0], *yf, f + times_shift) : std::move(done[0]);
  } else if (!yf) {
    out = p.add(done[0], co_await p.mul_trunc(power[m], done[1]));
  } else {
    const auto left = detail::side_by_side<P>(std::vector<typename P::Share>{done[0], done[1]}, flat);
    const auto right = detail::side_by_side<P>(std::vector<typename P::Share>{*yf, done[2]}, flat);
    out = co_await p.dot_trunc(left, right, f + times_shift);
  }
  co_return reshape<P>(out, s);
}

namespace detail {
// Products (each with its truncation) and their levels that polynomial()
// takes for one piece, for the plan below.
struct PieceProducts {
  std::size_t products = 0;
  std::size_t levels = 0;
};
inline PieceProducts polynomial_products(const Piece& piece, bool exact, int frac_bits) {
  const std::size_t d = piece.coefficients.size() - 1;
  const bool folded = d >= 2 && exact && folded_coefficient_bits(piece, frac_bits) > 0;
  PieceProducts c{1, 1};
  std::size_t known = 1;
  if (folded && d >= 3 && square_beside_t_fits(frac_bits)) c.products = 2, known = 2;
  for (; known < d; known *= 2) {
    if (folded && 2 * known >= d) break;
    c.products += std::min(d, 2 * known) - known;
    ++c.levels;
  }
  c.products += folded ? 2 : 1;  // the folded pair, or the sum's truncation
  ++c.levels;
  return c;
}

// Whether piecewise_selected beats piecewise's every-piece form for n
// elements on costs C, by rounds x RTT + bytes / bandwidth on the LAN (as
// the argmax tournament plans). A product with its truncation costs a
// product, and where truncation is exact a truncation more and 2 rounds
// (1 with pairs: counted as 2, which leans towards the every-piece form).
template <CostModel C>
bool selecting_first_pays(const Piecewise& spec, std::size_t n, bool exact, bool times, int frac_bits) {
  const std::size_t cuts = spec.breakpoints.size();
  if (cuts == 0 || spec.pieces.size() != cuts + 1) return false;
  const std::uint64_t product_rounds = exact ? 2 : 1;
  // (A fused product truncates in its own message; exact truncation adds
  // party 0's part of the wrap, counted as a truncation.)
  const double product_bytes = double((exact ? C::mul(n) + C::truncate(n) : C::mul(n)).max_bytes());
  const OpCost compare = C::msb_bits(ring_bits, n * cuts, 0);
  std::size_t live = 0, every_products = 0, every_levels = 0;
  for (const Piece& piece : spec.pieces) {
    if (piece.kind == Piece::Kind::zero) continue;
    ++live;
    PieceProducts c = piece.kind == Piece::Kind::polynomial ? polynomial_products(piece, exact, frac_bits) : PieceProducts{};
    if (times) ++c.products, ++c.levels;
    every_products += c.products;
    every_levels = std::max(every_levels, c.levels);
  }
  if (live == 0) return false;
  const OpCost select = C::bit_dot(n * live, live);
  const double every_rounds = double(std::max<std::uint64_t>(compare.rounds, every_levels * product_rounds) + select.rounds);
  const double every_bytes = double(compare.max_bytes() + select.max_bytes()) + double(every_products) * product_bytes;

  const std::size_t degree = max_degree(spec), m = (degree + 1) / 2;
  const std::size_t levels = (m > 0 ? 1 + ceil_log2(m) : 0) + 1 + (degree > m || times ? 1 : 0);
  const std::size_t products = (m > 0 ? m : 0) + 1 + (degree > m ? 1 + (times ? 1 : 0) : 0) + (degree > m || times ? 1 : 0);
  const OpCost to_arith = C::bit_to_arith(n * cuts);
  const double selected_rounds = double(compare.rounds + to_arith.rounds + levels * product_rounds);
  const double selected_bytes = double(compare.max_bytes() + to_arith.max_bytes()) + double(products) * product_bytes;
  const Link lan = lan_link();
  return lan.seconds(selected_rounds, selected_bytes) < lan.seconds(every_rounds, every_bytes);
}

template <Protocol P>
bool selecting_first_pays(const P& p, const Piecewise& spec, std::size_t n, bool times) {
  return with_costs(p, [&]<CostModel C>() {
    return selecting_first_pays<C>(spec, n, truncates_exactly(p), times, p.frac_bits());
  });
}

// Whether piecewise_each selects its pieces with the arithmetic one-hot
// (rss3 dcf: as few rounds and bytes as selecting first), planned for n
// elements; the one place both piecewise and piecewise_each ask.
template <Protocol P>
bool arithmetic_one_hot_pays(const P& p, const Piecewise& spec, std::size_t n) {
  if constexpr (ArithmeticOneHot<P>) {
    std::size_t live = 0;
    for (const Piece& piece : spec.pieces) live += piece.kind != Piece::Kind::zero;
    return live > 0 && arithmetic_select_pays(p, ring_bits, n * spec.breakpoints.size(), n, live);
  } else {
    return false;
  }
}
}  // namespace detail

// Every piece on every element. With `times`, returns f(x) * times /
// 2^times_shift: each piece's value is multiplied by it while the
// comparisons run, so the product costs no extra round. (Pieces outside
// their segment may overflow; the exact 0 of their indicator removes them.)
// plan_elements > 0: the select is planned for that many elements (see
// piecewise).
template <Protocol P>
Task<typename P::Share> piecewise_each(P& p, const typename P::Share& x, const Piecewise& spec,
                                       const std::optional<typename P::Share>& times = std::nullopt,
                                       int times_shift = 0, std::size_t plan_elements = 0) {
  const std::size_t cuts = spec.breakpoints.size();
  if (spec.pieces.size() != cuts + 1)
    throw Error(ErrorCode::invalid_argument, "piecewise: " + std::to_string(spec.pieces.size()) +
                                                 " pieces for " + std::to_string(cuts) +
                                                 " breakpoints");
  const Shape s = P::shape(x);
  const FixedPoint fp(p.frac_bits());
  // The J non-zero pieces: their indicators on a new last axis (..., J)
  // beside their values (..., J) select them.
  std::vector<std::size_t> live;
  for (std::size_t j = 0; j < spec.pieces.size(); ++j)
    if (spec.pieces[j].kind != Piece::Kind::zero) live.push_back(j);
  const std::size_t count = live.size();
  if (count == 0) co_return public_share(p, x, ring_zeros(s));
  Shape stacked = s;
  stacked.push_back(count);
  // below[..., i] = [x < b_i], all in one batched comparison.
  std::vector<Ring> breakpoints;
  for (double b : spec.breakpoints) breakpoints.push_back(fp.encode(b));
  std::vector<Task<typename P::Share>> work;
  // Where truncation is exact, one fork per live piece, in order, then the
  // comparisons' (last: they use no truncation pairs, and a burst's k-th
  // fork takes 1/(k+1) of what its parent has left, rss3_pairs.cppm).
  // Otherwise the comparisons' fork first and one per piece, live or not:
  // stream ids set which party leads a comparison, so this layout keeps the
  // round counts of probabilistic runs (and their results) as they were.
  const bool pieces_first = truncates_exactly(p);
  std::vector<P> forks;
  for (std::size_t c = 0; c <= (pieces_first ? count : spec.pieces.size()); ++c) forks.push_back(p.fork());
  P& compare_fork = pieces_first ? forks[count] : forks[0];
  auto piece_fork = [&](std::size_t c) -> P& { return pieces_first ? forks[c] : forks[live[c] + 1]; };
  // A piece's value, times the multiplier when there is one.
  auto piece_value = [&](P& q, const Piece& piece) -> Task<typename P::Share> {
    if (piece.kind == Piece::Kind::polynomial) {
      typename P::Share v = co_await polynomial(q, x, piece);
      if (!times) co_return v;
      co_return co_await q.mul_trunc(v, *times, q.frac_bits() + times_shift);
    }
    if (!times) co_return x;  // the identity
    co_return co_await q.mul_trunc(x, *times, q.frac_bits() + times_shift);
  };
  for (std::size_t c = 0; c < count; ++c) work.push_back(piece_value(piece_fork(c), spec.pieces[live[c]]));
  // The comparisons start first, then the pieces, all in the same ticks.
  // Piece j's indicator: [x < b_j] - [x < b_{j-1}] (the breakpoints ascend;
  // first: [x < b_0], last: 1 - [x < b_last]); XOR for bits.
  if constexpr (detail::ArithmeticOneHot<P>) {
    if (detail::arithmetic_one_hot_pays(p, spec, plan_elements > 0 ? plan_elements : element_count(s))) {
      auto [below, done] = co_await when_all(below_each(compare_fork, x, breakpoints), when_all(std::move(work)));
      auto indicators = detail::piece_indicators<P>(below, cuts, live, [](Ring at, Ring before) { return at - before; });
      if (live.back() == cuts) indicators = p.add_public(indicators, detail::top_is_one(stacked, count));
      co_return reshape<P>(co_await p.dot_trunc(indicators, detail::side_by_side<P>(done, s), 0), s);
    }
  }
  auto [below, done] = co_await when_all(below_each_bits(compare_fork, x, breakpoints), when_all(std::move(work)));
  auto indicators = detail::piece_indicators<P>(below, cuts, live, [](Ring at, Ring before) { return at ^ before; });
  if (live.back() == cuts) indicators = p.bits_xor_public(indicators, detail::top_is_one(stacked, count));
  co_return reshape<P>(co_await p.bit_dot(indicators, detail::side_by_side<P>(done, s)), s);
}

// f(x) (times `times` / 2^times_shift) by whichever form costs less here:
// piecewise_selected where the backend sums products and many elements make
// the every-piece form's bytes cost more than the selected form's rounds
// (detail::selecting_first_pays), else piecewise_each. plan_elements > 0:
// choose as for that many elements (a caller that splits one activation
// into waves passes the whole's count, so every wave computes what the
// whole would, bit for bit).
template <Protocol P>
Task<typename P::Share> piecewise(P& p, const typename P::Share& x, const Piecewise& spec,
                                  const std::optional<typename P::Share>& times = std::nullopt,
                                  int times_shift = 0, std::size_t plan_elements = 0) {
  if constexpr (detail::SumsProducts<P>) {
    const std::size_t n = plan_elements > 0 ? plan_elements : element_count(P::shape(x));
    // (selecting_first_pays is false when every piece is zero.)
    if (!detail::arithmetic_one_hot_pays(p, spec, n) && detail::selecting_first_pays(p, spec, n, times.has_value()))
      co_return co_await piecewise_selected(p, x, spec, times, times_shift);
  }
  co_return co_await piecewise_each(p, x, spec, times, times_shift, plan_elements);
}

}  // namespace mpcache::ops
