// See ref_math.hpp. Our buffers are adapted (xt::adapt, no copy, no
// ownership) as xtensor containers of their shape; xtensor evaluates the
// expressions element by element into `out`. xt::linalg needs xtensor-blas,
// which we do not use: the product is a loop over row views.
#include "ref_math.hpp"

#include <array>
#include <cstddef>
#include <span>

#include <xtensor/xadapt.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xview.hpp>

namespace mpcache::ref_math {

namespace {

// A buffer as a 1-D (or 2-D, rows x cols) xtensor container, without a copy.
auto vector_of(std::span<const double> s) {
  return xt::adapt(s.data(), s.size(), xt::no_ownership(), std::array<std::size_t, 1>{s.size()});
}
auto vector_of(std::span<double> s) {
  return xt::adapt(s.data(), s.size(), xt::no_ownership(), std::array<std::size_t, 1>{s.size()});
}
auto matrix_of(std::span<const double> s, std::size_t rows, std::size_t cols) {
  return xt::adapt(s.data(), rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
}
auto matrix_of(std::span<double> s, std::size_t rows, std::size_t cols) {
  return xt::adapt(s.data(), rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
}

}  // namespace

void add(std::span<const double> a, std::span<const double> b, std::span<double> out) {
  auto o = vector_of(out);
  xt::noalias(o) = vector_of(a) + vector_of(b);
}
void sub(std::span<const double> a, std::span<const double> b, std::span<double> out) {
  auto o = vector_of(out);
  xt::noalias(o) = vector_of(a) - vector_of(b);
}
void mul(std::span<const double> a, std::span<const double> b, std::span<double> out) {
  auto o = vector_of(out);
  xt::noalias(o) = vector_of(a) * vector_of(b);
}
void mul_scaled(std::span<const double> a, std::span<const double> b, double s, std::span<double> out) {
  auto o = vector_of(out);
  xt::noalias(o) = vector_of(a) * vector_of(b) * s;
}
void neg(std::span<const double> a, std::span<double> out) {
  auto o = vector_of(out);
  xt::noalias(o) = -vector_of(a);
}
void scale(std::span<const double> a, double s, std::span<double> out) {
  auto o = vector_of(out);
  xt::noalias(o) = vector_of(a) * s;
}

void matmul(std::span<const double> a, std::span<const double> b, std::span<double> out, std::size_t m,
            std::size_t k, std::size_t n) {
  const auto lhs = matrix_of(a, m, k);
  const auto rhs = matrix_of(b, k, n);
  auto product = matrix_of(out, m, n);
  product.fill(0.0);
  for (std::size_t i = 0; i < m; ++i) {
    auto row = xt::view(product, i, xt::all());
    for (std::size_t t = 0; t < k; ++t) {
      const double av = lhs(i, t);
      if (av == 0.0) continue;  // one-hot rows: skip the zeros
      xt::noalias(row) += av * xt::view(rhs, t, xt::all());
    }
  }
}

}  // namespace mpcache::ref_math
