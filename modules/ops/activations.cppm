// GeLU and SiLU as piecewise polynomials (coefficients fitted by least squares
// on Chebyshev nodes against the exact functions, in t = (x - c)/h):
//   GeLU: 0 below -5 | degree 4 on [-5, -1.95) | degree 10 on [-1.95, 4) | x
//         fit error <= 4.1e-4; total (fixed point) <= 1e-3 (tested)
//   SiLU: 0 below -10 | degree 5 on [-10, -3) | degree 8 on [-3, 3) |
//         degree 5 on [3, 10) | x;  fit error <= 4.6e-4; total <= 1e-3 (tested)
//   cost (rss3): 8 rounds (comparisons overlap the polynomials; tested);
//   rss3 dcf: the pieces selected by a ring one-hot and dot_trunc
//   (piecewise.cppm): SiLU 5, GeLU 6, silu_times 6; where truncation is
//   exact, with truncation pairs: SiLU 4, GeLU 5, silu_times 5 (tested)
export module mpcache.ops:activations;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :piecewise;

export namespace mpcache::ops {

inline const Piecewise& gelu_spec() {
  using K = Piece::Kind;
  static const Piecewise spec{
      {-5.0, -1.95, 4.0},
      {Piece{K::zero, 0, 1, {}},
       Piece{K::polynomial, -3.475, 1.525,
             {-0.000820462507494, -0.00358316402823, -0.0122184764047, -0.0212525767695,
              -0.0119960867105}},
       Piece{K::polynomial, 1.025, 2.975,
             {0.868212125441, 3.23848309268, 1.01324290396, -3.09817373332, 1.45359814448,
              3.39420840902, -2.9859321932, -2.0220425071, 2.29412909844, 0.512579979388,
              -0.668476939466}},
       Piece{K::identity, 0, 1, {}}}};
  return spec;
}

inline const Piecewise& silu_spec() {
  using K = Piece::Kind;
  static const Piecewise spec{
      {-10.0, -3.0, 3.0, 10.0},
      {Piece{K::zero, 0, 1, {}},
       Piece{K::polynomial, -6.5, 3.5,
             {-0.00962154171319, -0.028295842034, -0.0432258454992, -0.0410484538655,
              -0.0187116650908, -0.00166195730053}},
       Piece{K::polynomial, 0.0, 3.0,
             {0.000368474373644, 1.5, 2.22997122163, 0.0, -1.50492648018, 0.0, 0.878666613797,
              0.0, -0.246623943387}},
       Piece{K::polynomial, 6.5, 3.5,
             {6.49037845829, 3.52829584203, -0.0432258454992, 0.0410484538655, -0.0187116650908,
              0.00166195730053}},
       Piece{K::identity, 0, 1, {}}}};
  return spec;
}

template <Protocol P>
Task<typename P::Share> gelu(P& p, const typename P::Share& x) {
  if constexpr (ExactReals<P>)
    co_return p.map_real(x, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  co_return co_await piecewise(p, x, gelu_spec());
}

template <Protocol P>
Task<typename P::Share> silu(P& p, const typename P::Share& x) {
  if constexpr (ExactReals<P>) co_return p.map_real(x, [](double v) { return v / (1 + std::exp(-v)); });
  co_return co_await piecewise(p, x, silu_spec());
}

// silu(x) * y / 2^shift (LLaMA's gated MLP) in SiLU's rounds: y multiplies
// each piece while the comparisons run. A shift keeps the next matmul (the
// down projection) that many bits further from truncation's failure range.
// Error: <= 1e-3 |y| + 2^-(f-shift-1) (tested).
template <Protocol P>
Task<typename P::Share> silu_times(P& p, const typename P::Share& x, const typename P::Share& y, int shift = 0) {
  if constexpr (ExactReals<P>) {
    auto product = co_await p.mul_trunc(co_await silu(p, x), y);
    co_return p.map_real(product, [shift](double v) { return std::ldexp(v, -shift); });
  }
  co_return co_await piecewise(p, x, silu_spec(), std::optional<typename P::Share>(y), shift);
}

}  // namespace mpcache::ops
