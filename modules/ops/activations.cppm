// GeLU and SiLU as piecewise polynomials (coefficients fitted by least squares
// on Chebyshev nodes against the exact functions, in t = (x - c)/h):
//   GeLU: 0 below -5 | degree 4 on [-5, -1.95) | degree 10 on [-1.95, 4) | x
//         fit error <= 4.1e-4; total (fixed point) <= 1e-3 (tested)
//   SiLU: 0 below -10 | degree 5 on [-10, -3) | degree 8 on [-3, 3) |
//         degree 5 on [3, 10) | x;  fit error <= 4.6e-4; total <= 1e-3 (tested)
//   cost (rss3): 8 rounds (comparisons overlap the polynomials; tested);
//   over many elements (a prefill's MLP) one polynomial per element,
//   selected after the comparisons (piecewise_selected): SiLU with y 13
//   rounds, about half the bytes (tested);
//   rss3 dcf: the pieces selected by a ring one-hot and dot_trunc
//   (piecewise.cppm): SiLU 5, GeLU 6, silu_times 6; where truncation is
//   exact as well, with truncation pairs, the splines below: SiLU 3, GeLU
//   3, silu_times 4 (tested)
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

// Where truncation is exact and comparisons are rss3 dcf's
// (detail::splines_pay), splines of degree-4 pieces (least squares on
// Chebyshev nodes, as above): each piece takes 2 rounds there (t and t^2,
// then the folded sum; piecewise.cppm), within the comparisons' 2, so the
// activation takes 3 rounds where the degree-10 piece took 5.
// More breakpoints (6 and 7 where there were 3 and 4): more comparisons
// per value, all in the one batch.
//   GeLU: 0 below -5 | 6 pieces on [-5, -2.6, -1.2, 0, 1.2, 2.4, 4) | x
//         fit error <= 1.1e-4 (x above 4: 1.3e-4)
//   SiLU: 0 below -10 | 7 pieces on [-10, -6, -3, -1, 1, 3, 6, 10) | x
//         fit error <= 8.1e-5 (the tails: 4.6e-4, as above)
inline const Piecewise& gelu_spline_spec() {
  using K = Piece::Kind;
  static const Piecewise spec{
      {-5.0, -2.6, -1.2, 0.0, 1.2, 2.4, 4.0},
      {Piece{K::zero, 0, 1, {}},
       Piece{K::polynomial, -3.8, 1.2,
             {-0.000283346477953319, -0.00079476046137302, -0.00245001959566559, -0.0051790713155697,
              -0.00332039487497981}},
       Piece{K::polynomial, -1.9, 0.7,
             {-0.0545638517568912, -0.0675932021624977, -0.0258407538942813, 0.00452975118040173,
              0.00530586288008255}},
       Piece{K::polynomial, -0.6, 0.6,
             {-0.164550611962974, 0.0451267580096638, 0.0983454998353429, 0.0240190655365949,
              -0.00283798314716062}},
       Piece{K::polynomial, 0.6, 0.6,
             {0.435449388037028, 0.554873241990335, 0.0983454998353306, -0.0240190655365938,
              -0.00283798314714881}},
       Piece{K::polynomial, 1.8, 0.6,
             {1.73532313997261, 0.663894933098089, -0.0175808384904634, -0.00465432648380748,
              0.00338118026548078}},
       Piece{K::polynomial, 3.2, 0.8,
             {3.19780444879121, 0.805511079355888, -0.00634447936966011, 0.00425615390464527,
              -0.00136379574965134}},
       Piece{K::identity, 0, 1, {}}}};
  return spec;
}

inline const Piecewise& silu_spline_spec() {
  using K = Piece::Kind;
  static const Piecewise spec{
      {-10.0, -6.0, -3.0, -1.0, 1.0, 3.0, 6.0, 10.0},
      {Piece{K::zero, 0, 1, {}},
       Piece{K::polynomial, -8.0, 2.0,
             {-0.0026845040715772, -0.00460828370922828, -0.00398845540404997, -0.00256544607615672,
              -0.000970219982028194}},
       Piece{K::polynomial, -4.5, 1.5,
             {-0.0494269782766088, -0.0571714913713064, -0.0296066977286659, -0.00661528337446316,
              0.000462386694274028}},
       Piece{K::polynomial, -2.0, 1.0,
             {-0.238419941583406, -0.0908964986579721, 0.0252836033386002, 0.0275477885894379,
              0.00754106570263687}},
       Piece{K::polynomial, 0.0, 1.0, {5.49199194121762e-05, 0.5, 0.248992329774536, 0.0, -0.0180410075857863}},
       Piece{K::polynomial, 2.0, 1.0,
             {1.7615800584166, 1.09089649865797, 0.0252836033385648, -0.0275477885894356,
              0.00754106570267151}},
       Piece{K::polynomial, 4.5, 1.5,
             {4.45057302172341, 1.55717149137128, -0.02960669772884, 0.00661528337449719,
              0.00046238669444287}},
       Piece{K::polynomial, 8.0, 2.0,
             {7.99731549592844, 2.0046082837092, -0.00398845540416556, 0.00256544607619346,
              -0.000970219981916142}},
       Piece{K::identity, 0, 1, {}}}};
  return spec;
}

// The spec p evaluates on x: the spline where it pays (detail::splines_pay).
template <Protocol P>
const Piecewise& activation_spec(const P& p, const typename P::Share& x, const Piecewise& by_degree,
                                 const Piecewise& spline) {
  return detail::splines_pay(p, x) ? spline : by_degree;
}

// plan_elements > 0: choose the piecewise form as for that many elements
// (piecewise, piecewise.cppm: waves of one activation pass the whole's).
template <Protocol P>
Task<typename P::Share> gelu(P& p, const typename P::Share& x, std::size_t plan_elements = 0) {
  if constexpr (ExactReals<P>)
    co_return p.map_real(x, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  co_return co_await piecewise(p, x, activation_spec(p, x, gelu_spec(), gelu_spline_spec()), std::nullopt, 0,
                               plan_elements);
}

template <Protocol P>
Task<typename P::Share> silu(P& p, const typename P::Share& x, std::size_t plan_elements = 0) {
  if constexpr (ExactReals<P>) co_return p.map_real(x, [](double v) { return v / (1 + std::exp(-v)); });
  co_return co_await piecewise(p, x, activation_spec(p, x, silu_spec(), silu_spline_spec()), std::nullopt, 0,
                               plan_elements);
}

// silu(x) * y / 2^shift (LLaMA's gated MLP) in SiLU's rounds: y multiplies
// each piece while the comparisons run. A shift keeps the next matmul (the
// down projection) that many bits further from truncation's failure range.
// Error: <= 1e-3 |y| + 2^-(f-shift-1) (tested).
template <Protocol P>
Task<typename P::Share> silu_times(P& p, const typename P::Share& x, const typename P::Share& y, int shift = 0,
                                   std::size_t plan_elements = 0) {
  if constexpr (ExactReals<P>) {
    auto product = co_await p.mul_trunc(co_await silu(p, x), y);
    co_return p.map_real(product, [shift](double v) { return std::ldexp(v, -shift); });
  }
  co_return co_await piecewise(p, x, activation_spec(p, x, silu_spec(), silu_spline_spec()),
                               std::optional<typename P::Share>(y), shift, plan_elements);
}

}  // namespace mpcache::ops
