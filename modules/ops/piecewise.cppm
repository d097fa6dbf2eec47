// Piecewise polynomials, the PUMA way of computing activations: all segment
// comparisons in one batched msb, all polynomial pieces concurrently, then one
// round of products with the segment indicators.
// A polynomial piece is fitted in t = (x - center) / half_width, t in [-1, 1],
// so that coefficient rounding (2^-(f+1) each) costs at most sum|c| 2^-(f+1).
//   cost (rss3): max(10, 2 + ceil(log2 degree)) + 1 rounds
module;
#include "prelude.hpp"
export module mpcache.ops:piecewise;
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

// c_0 + c_1 t + ... for t = (x - center) / half_width.
template <Protocol P>
Task<typename P::Share> polynomial(P& p, const typename P::Share& x, const Piece& piece) {
  const Shape s = P::shape(x);
  const FixedPoint fp(p.frac_bits());
  const double scale = fp.scale();
  // t = trunc(x / h - center / h at scale 2^(2f)).
  auto t_wide = p.add_public(
      p.mul_public(x, ring_filled(s, fp.encode(1.0 / piece.half_width))),
      ring_filled(s, static_cast<Ring>(static_cast<std::int64_t>(
                         std::llround(-piece.center / piece.half_width * scale * scale)))));
  const std::size_t degree = piece.coefficients.size() - 1;
  std::vector<typename P::Share> power(degree + 1);
  power[1] = co_await p.truncate(t_wide, p.frac_bits());
  // Log-depth powers: round r fills (2^(r-1), 2^r] from products of known ones.
  for (std::size_t known = 1; known < degree; known *= 2) {
    std::vector<P> forks;
    std::vector<Task<typename P::Share>> products;
    const std::size_t upto = std::min(degree, 2 * known);
    for (std::size_t k = known + 1; k <= upto; ++k) forks.push_back(p.fork());
    for (std::size_t k = known + 1; k <= upto; ++k)
      products.push_back(forks[k - known - 1].mul_trunc(power[known], power[k - known]));
    auto results = co_await when_all(std::move(products));
    for (std::size_t k = known + 1; k <= upto; ++k) power[k] = std::move(results[k - known - 1]);
  }
  // sum c_k t^k at scale 2^(2f), then one truncation.
  auto acc = public_share(p, x, ring_filled(s, static_cast<Ring>(static_cast<std::int64_t>(
                                                   std::llround(piece.coefficients[0] * scale * scale)))));
  for (std::size_t k = 1; k <= degree; ++k)
    acc = p.add(acc, p.mul_public(power[k], ring_filled(s, fp.encode(piece.coefficients[k]))));
  co_return co_await p.truncate(acc, p.frac_bits());
}

// With `times`, returns f(x) * times / 2^times_shift: each piece's value is
// multiplied by it while the comparisons run, so the product costs no extra
// round. (Pieces outside their segment may overflow; the exact 0 of their
// indicator removes them.)
template <Protocol P>
Task<typename P::Share> piecewise(P& p, const typename P::Share& x, const Piecewise& spec,
                                  const std::optional<typename P::Share>& times = std::nullopt,
                                  int times_shift = 0) {
  const std::size_t cuts = spec.breakpoints.size();
  if (spec.pieces.size() != cuts + 1)
    throw Error(ErrorCode::invalid_argument, "piecewise: " + std::to_string(spec.pieces.size()) +
                                                 " pieces for " + std::to_string(cuts) +
                                                 " breakpoints");
  const Shape s = P::shape(x);
  const FixedPoint fp(p.frac_bits());
  // below[..., i] = [x < b_i], all in one msb call.
  std::vector<Ring> breakpoints;
  for (double b : spec.breakpoints) breakpoints.push_back(fp.encode(b));
  auto compare = [&](P& q) { return below_each(q, x, breakpoints); };
  std::vector<Task<typename P::Share>> work;
  std::vector<P> forks;
  for (std::size_t j = 0; j <= spec.pieces.size(); ++j) forks.push_back(p.fork());
  // A piece's value, times the multiplier when there is one.
  auto piece_value = [&](P& q, const Piece& piece) -> Task<typename P::Share> {
    typename P::Share v = x;
    if (piece.kind == Piece::Kind::polynomial) v = co_await polynomial(q, x, piece);
    if (!times) co_return v;
    co_return co_await q.mul_trunc(v, *times, q.frac_bits() + times_shift);
  };
  work.push_back(compare(forks[0]));
  for (std::size_t j = 0; j < spec.pieces.size(); ++j)
    if (spec.pieces[j].kind != Piece::Kind::zero) work.push_back(piece_value(forks[j + 1], spec.pieces[j]));
  auto done = co_await when_all(std::move(work));
  auto below_all = std::move(done[0]);
  auto below = [&](std::size_t i) {
    return P::apply(below_all, [&](const RingTensor& t) {
      return ring_reshape(ring_slice_last(t, i, i + 1), s);
    });
  };
  // Indicator of piece j: [x < b_j] - [x < b_{j-1}] (first: [x < b_0], last: 1 - [x < b_last]).
  std::vector<Task<typename P::Share>> terms;
  std::vector<P> term_forks;
  std::vector<typename P::Share> indicators, values;
  std::size_t next_poly = 1;  // done[1..]: the non-zero pieces' values, in order
  for (std::size_t j = 0; j < spec.pieces.size(); ++j) {
    const Piece& piece = spec.pieces[j];
    if (piece.kind == Piece::Kind::zero) continue;
    typename P::Share ind = j < cuts ? below(j) : public_share(p, x, ring_filled(s, 1));
    if (j > 0) ind = p.sub(ind, below(j - 1));
    indicators.push_back(std::move(ind));
    values.push_back(std::move(done[next_poly++]));
  }
  for (std::size_t j = 0; j < indicators.size(); ++j) term_forks.push_back(p.fork());
  for (std::size_t j = 0; j < indicators.size(); ++j)
    terms.push_back(term_forks[j].mul(indicators[j], values[j]));
  auto products = co_await when_all(std::move(terms));
  auto result = public_share(p, x, ring_zeros(s));
  for (auto& t : products) result = p.add(result, t);
  co_return result;
}

}  // namespace mpcache::ops
