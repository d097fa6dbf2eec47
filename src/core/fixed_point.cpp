module mpcache.core;
import mpcache.std;

namespace mpcache {

FixedPoint::FixedPoint(int frac_bits) : frac_bits_(frac_bits), scale_(std::ldexp(1.0, frac_bits)) {
  if (frac_bits < 0 || frac_bits > 40)
    throw Error(ErrorCode::invalid_argument,
                "fixed-point fraction bits must be in [0, 40], got " + std::to_string(frac_bits));
}

Ring FixedPoint::encode(double x) const {
  const double scaled = std::nearbyint(x * scale_);
  // 2^63 itself is not representable as int64; stay strictly inside.
  if (!std::isfinite(scaled) || std::fabs(scaled) >= 9.2233720368547758e18)
    throw Error(ErrorCode::invalid_argument,
                "value " + std::to_string(x) + " does not fit the fixed-point range with " +
                    std::to_string(frac_bits_) + " fraction bits");
  return static_cast<Ring>(static_cast<std::int64_t>(scaled));
}

double FixedPoint::decode(Ring v) const noexcept {
  return static_cast<double>(static_cast<std::int64_t>(v)) / scale_;
}

RingTensor FixedPoint::encode(const RealTensor& x) const {
  RingTensor out = RingTensor::from_shape(x.shape());
  auto src = x.begin();
  for (auto dst = out.begin(); dst != out.end(); ++dst, ++src) *dst = encode(*src);
  return out;
}

RealTensor FixedPoint::decode(const RingTensor& v) const {
  RealTensor out = RealTensor::from_shape(v.shape());
  auto src = v.begin();
  for (auto dst = out.begin(); dst != out.end(); ++dst, ++src) *dst = decode(*src);
  return out;
}

}  // namespace mpcache
