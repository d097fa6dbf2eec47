// The float64 arithmetic of the reference backend (Ref, src/proto/ref.cpp),
// over raw row-major buffers. Plain C++, written with xtensor in
// ref_math.cpp: xtensor and the flag it needs under clang
// (-fno-relaxed-template-template-args, which a unit that imports our BMIs
// cannot take) stay in that one file, out of every module unit.
//
// Every function writes `out`, which holds as many elements as its inputs
// (a matrix product: m*n) and may not overlap them.
#pragma once
#include <cstddef>
#include <span>

namespace mpcache::ref_math {

void add(std::span<const double> a, std::span<const double> b, std::span<double> out);  // a + b
void sub(std::span<const double> a, std::span<const double> b, std::span<double> out);  // a - b
void mul(std::span<const double> a, std::span<const double> b, std::span<double> out);  // a * b
// (a * b) * s, in that order (a product, then its truncation).
void mul_scaled(std::span<const double> a, std::span<const double> b, double s, std::span<double> out);
void neg(std::span<const double> a, std::span<double> out);               // -a
void scale(std::span<const double> a, double s, std::span<double> out);  // a * s

// (m,k) x (k,n) -> (m,n). Each out(i,j) sums a(i,t) * b(t,j) in order of t
// from 0.0, skipping the terms where a(i,t) is zero (one-hot rows).
void matmul(std::span<const double> a, std::span<const double> b, std::span<double> out, std::size_t m,
            std::size_t k, std::size_t n);

}  // namespace mpcache::ref_math
