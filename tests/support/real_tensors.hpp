// Float64 comparisons for tests: the largest error between two tensors of
// one shape, the largest magnitude, a tensor scaled, a grid. Include after the
// `import` lines.
#pragma once

namespace mpcache::testing {

// max |a - b| over tensors of one shape (an error otherwise), and max |a|.
inline double max_abs_diff(const RealTensor& a, const RealTensor& b) {
  if (a.shape() != b.shape())
    throw Error(ErrorCode::invalid_argument,
                "max_abs_diff: shapes " + shape_string(a.shape()) + " and " + shape_string(b.shape()) + " differ");
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a.data()[i] - b.data()[i]));
  return m;
}
inline double max_abs(const RealTensor& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

// Every element times s.
inline RealTensor scaled(RealTensor a, double s) {
  for (double& v : a) v *= s;
  return a;
}

// n evenly spaced values from lo to hi, both included.
inline RealTensor linspace(double lo, double hi, std::size_t n) {
  RealTensor x = RealTensor::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) x(i) = lo + (hi - lo) * static_cast<double>(i) / (n - 1);
  return x;
}

}  // namespace mpcache::testing
