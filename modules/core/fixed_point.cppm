// Fixed-point encoding of reals in Z_2^64: x -> round(x * 2^f) mod 2^64.
export module mpcache.core:fixed_point;
import mpcache.std;
import :ring;

export namespace mpcache {

// Real numbers in float64: the clear-text side of encode/decode, and the
// values of the exact-reals backend (ref).
using RealTensor = Tensor<double>;

inline constexpr int default_frac_bits = 18;

class FixedPoint {
 public:
  explicit FixedPoint(int frac_bits = default_frac_bits);
  int frac_bits() const noexcept { return frac_bits_; }
  double scale() const noexcept { return scale_; }

  // Round to nearest; throws Error(invalid_argument) for NaN/inf or a value
  // whose encoding does not fit in the signed 64-bit range.
  Ring encode(double x) const;
  double decode(Ring v) const noexcept;
  RingTensor encode(const RealTensor& x) const;
  RealTensor decode(const RingTensor& v) const;

 private:
  int frac_bits_;
  double scale_;
};

}  // namespace mpcache
