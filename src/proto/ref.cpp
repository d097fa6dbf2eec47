module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include "ref_math.hpp"  // the float64 arithmetic, with xtensor behind it (plain C++)
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

namespace {
void require_same(const RealTensor& a, const RealTensor& b, const char* what) {
  if (a.shape() != b.shape())
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": shapes " +
                    shape_string(Shape(a.shape().begin(), a.shape().end())) + " and " +
                    shape_string(Shape(b.shape().begin(), b.shape().end())) + " differ");
}

std::span<const double> elements(const RealTensor& t) { return {t.data(), t.size()}; }
std::span<double> elements(RealTensor& t) { return {t.data(), t.size()}; }

// One of ref_math's element-wise functions into a new tensor of a's shape (b
// has it too: checked by the caller).
using Binary = void (*)(std::span<const double>, std::span<const double>, std::span<double>);
RealTensor elementwise(const RealTensor& a, const RealTensor& b, Binary f) {
  RealTensor out = RealTensor::from_shape(a.shape());
  f(elements(a), elements(b), elements(out));
  return out;
}
RealTensor times(const RealTensor& a, double s) {
  RealTensor out = RealTensor::from_shape(a.shape());
  ref_math::scale(elements(a), s, elements(out));
  return out;
}
}  // namespace

RealTensor real_matmul(const RealTensor& a, const RealTensor& b) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw Error(ErrorCode::invalid_argument,
                "ref matmul: shapes " + shape_string(Shape(a.shape().begin(), a.shape().end())) +
                    " x " + shape_string(Shape(b.shape().begin(), b.shape().end())) +
                    " do not chain");
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  RealTensor out = RealTensor::from_shape({m, n});
  ref_math::matmul(elements(a), elements(b), elements(out), m, k, n);
  return out;
}

RealTensor ring_to_real(const RingTensor& t) {
  RealTensor out = RealTensor::from_shape(t.shape());
  auto o = out.begin();
  for (Ring v : t) *o++ = static_cast<double>(static_cast<std::int64_t>(v));
  return out;
}

RingTensor real_to_ring(const RealTensor& t) {
  RingTensor out = RingTensor::from_shape(t.shape());
  auto o = out.begin();
  for (double v : t) *o++ = static_cast<Ring>(static_cast<std::int64_t>(std::llround(v)));
  return out;
}

Ref::Ref(int frac_bits) : frac_bits_(frac_bits) { FixedPoint check(frac_bits); }

double Ref::max_abs(const RealTensor& t) {
  double m = 0;
  for (double v : t) m = std::max(m, std::abs(v));
  return m;
}

int Ref::apply_scale(double m) {
  if (!(m > 0)) return 0;
  if (!std::isfinite(m))
    throw Error(ErrorCode::invalid_argument, "ref: non-finite value in a layout transform");
  // m * 2^k <= 2^46 leaves 2^16 headroom for sums inside the transform.
  return std::clamp(46 - std::ilogb(m) - 1, -1000, 60);
}

RingTensor Ref::to_scaled(const RealTensor& t, int k) {
  RingTensor out = RingTensor::from_shape(t.shape());
  auto o = out.begin();
  for (double v : t) *o++ = static_cast<Ring>(static_cast<std::int64_t>(std::llround(std::ldexp(v, k))));
  return out;
}

RealTensor Ref::from_scaled(const RingTensor& t, int k) {
  RealTensor out = RealTensor::from_shape(t.shape());
  auto o = out.begin();
  for (Ring v : t) *o++ = std::ldexp(static_cast<double>(static_cast<std::int64_t>(v)), -k);
  return out;
}

Task<RefShare> Ref::input(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  if (!value)
    throw Error(ErrorCode::invalid_argument,
                "ref input from party " + std::to_string(owner) + ": no value given");
  if (shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument, "ref input: value has shape " +
                                                 shape_string(shape_of(*value)) +
                                                 ", declared shape is " + shape_string(shape));
  co_return RefShare{ring_to_real(*value)};
}

Task<RingTensor> Ref::reveal(const Share& a) { co_return real_to_ring(a.value); }

Task<std::optional<RingTensor>> Ref::reveal_to(PartyId, const Share& a) {
  co_return std::optional<RingTensor>(real_to_ring(a.value));
}

RefShare Ref::add(const Share& a, const Share& b) const {
  require_same(a.value, b.value, "ref add");
  return {elementwise(a.value, b.value, ref_math::add)};
}
RefShare Ref::sub(const Share& a, const Share& b) const {
  require_same(a.value, b.value, "ref sub");
  return {elementwise(a.value, b.value, ref_math::sub)};
}
RefShare Ref::neg(const Share& a) const {
  RealTensor out = RealTensor::from_shape(a.value.shape());
  ref_math::neg(elements(a.value), elements(out));
  return {std::move(out)};
}
RefShare Ref::add_public(const Share& a, const RingTensor& c) const {
  RealTensor r = ring_to_real(c);
  require_same(a.value, r, "ref add_public");
  return {elementwise(a.value, r, ref_math::add)};
}
RefShare Ref::mul_public(const Share& a, const RingTensor& c) const {
  RealTensor r = ring_to_real(c);
  require_same(a.value, r, "ref mul_public");
  return {elementwise(a.value, r, ref_math::mul)};
}
RefShare Ref::matmul_public(const Share& a, const RingTensor& c) const {
  return {real_matmul(a.value, ring_to_real(c))};
}

Task<RefShare> Ref::mul(const Share& a, const Share& b) {
  require_same(a.value, b.value, "ref mul");
  co_return RefShare{elementwise(a.value, b.value, ref_math::mul)};
}
Task<RefShare> Ref::matmul(const Share& a, const Share& b) {
  co_return RefShare{real_matmul(a.value, b.value)};
}
Task<RefShare> Ref::truncate(const Share& a, int bits) {
  co_return RefShare{times(a.value, std::ldexp(1.0, -bits))};
}
Task<RefShare> Ref::mul_trunc(const Share& a, const Share& b, int bits) {
  require_same(a.value, b.value, "ref mul_trunc");
  const int d = bits < 0 ? frac_bits_ : bits;
  RealTensor out = RealTensor::from_shape(a.value.shape());
  ref_math::mul_scaled(elements(a.value), elements(b.value), std::ldexp(1.0, -d), elements(out));
  co_return RefShare{std::move(out)};
}
Task<RefShare> Ref::matmul_trunc(const Share& a, const Share& b) {
  co_return RefShare{times(real_matmul(a.value, b.value), std::ldexp(1.0, -frac_bits_))};
}

Task<RefBits> Ref::to_bits(const Share& a, int width) {
  if (width < 1 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "to_bits: width " + std::to_string(width) + " is outside [1, 64]");
  const Ring mask = width >= ring_bits ? ~Ring{0} : (Ring{1} << width) - 1;
  RefBits out{real_to_ring(a.value)};
  for (auto& v : out.value) v &= mask;
  co_return out;
}
Task<RefBits> Ref::bits_and(const Bits& x, const Bits& y) { co_return RefBits{ring_and(x.value, y.value)}; }
RefBits Ref::bits_xor(const Bits& x, const Bits& y) const { return {ring_xor(x.value, y.value)}; }
RefBits Ref::bits_xor_public(const Bits& x, const RingTensor& c) const { return {ring_xor(x.value, c)}; }
RefBits Ref::bits_and_public(const Bits& x, const RingTensor& c) const { return {ring_and(x.value, c)}; }
RefBits Ref::bits_shift_left(const Bits& x, int n) const { return {ring_shift_left(x.value, n)}; }
RefBits Ref::bits_shift_right(const Bits& x, int n) const {
  return {ring_shift_right_logical(x.value, n)};
}
Task<RefShare> Ref::bit_to_arith(const Bits& x) {
  RealTensor out = RealTensor::from_shape(x.value.shape());
  auto o = out.begin();
  for (Ring v : x.value) *o++ = static_cast<double>(v & 1);
  co_return RefShare{std::move(out)};
}
Task<RingTensor> Ref::reveal_bits(const Bits& x) { co_return x.value; }
Task<RefShare> Ref::bit_dot(const Bits& b, const Share& x, int bits) {
  if (shape_of(b.value) != shape(x))
    throw Error(ErrorCode::invalid_argument, "ref bit_dot: bits " + shape_string(shape_of(b.value)) +
                                                 ", values " + shape_string(shape(x)));
  Shape s = shape(x);
  if (s.empty() || s.back() == 0)
    throw Error(ErrorCode::invalid_argument, "ref bit_dot over an empty last axis, shape " + shape_string(s));
  const std::size_t k = s.back(), rows = x.value.size() / k;
  s.back() = 1;
  RealTensor out = RealTensor::zeros(s);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < k; ++i)
      if (b.value.data()[r * k + i] & 1) out.data()[r] += x.value.data()[r * k + i];
  co_return RefShare{times(out, std::ldexp(1.0, -bits))};
}

RefShare Ref::from_real(const RealTensor& x) const { return {times(x, std::ldexp(1.0, frac_bits_))}; }
RealTensor Ref::to_real(const Share& a) const { return times(a.value, std::ldexp(1.0, -frac_bits_)); }

RefShare Ref::mul_real(const Share& a, const RealTensor& r) const {
  require_same(a.value, r, "ref mul_real");
  return {elementwise(a.value, r, ref_math::mul)};
}

RefShare Ref::exact_sign(const Share& a) const {
  RefShare out = a;
  for (auto& v : out.value) v = v < 0 ? 1.0 : 0.0;
  return out;
}

RefShare Ref::exact_one_hot(const Share& index, std::size_t classes) const {
  Shape s = shape(index);
  s.push_back(classes);
  RealTensor out = RealTensor::zeros(s);
  std::size_t row = 0;
  for (double v : index.value) {
    const auto c = static_cast<long long>(std::llround(v));
    if (c >= 0 && static_cast<std::size_t>(c) < classes) out.data()[row * classes + static_cast<std::size_t>(c)] = 1.0;
    ++row;
  }
  return {std::move(out)};
}

std::pair<RefShare, RefShare> Ref::exact_argmax_last(const Share& a) const {
  Shape out_shape = shape(a);
  if (out_shape.empty() || out_shape.back() == 0)
    throw Error(ErrorCode::invalid_argument, "ref argmax over an empty last axis, shape " + shape_string(out_shape));
  const std::size_t n = out_shape.back();
  out_shape.back() = 1;
  RealTensor value = RealTensor::from_shape(out_shape), index = RealTensor::from_shape(out_shape);
  for (std::size_t r = 0; r < value.size(); ++r) {
    const double* row = a.value.data() + r * n;
    const std::size_t best = static_cast<std::size_t>(std::max_element(row, row + n) - row);
    value.data()[r] = row[best];  // max_element keeps the first (lowest index) of ties
    index.data()[r] = static_cast<double>(best);
  }
  return {RefShare{std::move(value)}, RefShare{std::move(index)}};
}

std::pair<RefShare, RefShare> Ref::exact_topk_last(const Share& a, std::size_t k) const {
  Shape out_shape = shape(a);
  const std::size_t n = out_shape.empty() ? 0 : out_shape.back();
  if (k == 0 || k > n)
    throw Error(ErrorCode::invalid_argument, "ref top-" + std::to_string(k) + " of " + std::to_string(n) + " elements");
  out_shape.back() = k;
  RealTensor values = RealTensor::from_shape(out_shape), indices = RealTensor::from_shape(out_shape);
  std::vector<std::size_t> order(n);
  for (std::size_t r = 0; r < values.size() / k; ++r) {
    const double* row = a.value.data() + r * n;
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [row](std::size_t x, std::size_t y) { return row[x] != row[y] ? row[x] > row[y] : x < y; });
    for (std::size_t j = 0; j < k; ++j) {
      values.data()[r * k + j] = row[order[j]];
      indices.data()[r * k + j] = static_cast<double>(order[j]);
    }
  }
  return {RefShare{std::move(values)}, RefShare{std::move(indices)}};
}

RingTensor Ref::to_words(const Share& a) {
  static_assert(sizeof(double) == sizeof(Ring));
  RingTensor words = RingTensor::from_shape(a.value.shape());
  std::memcpy(words.data(), a.value.data(), words.size() * sizeof(Ring));
  return words;
}

RefShare Ref::from_words(const RingTensor& words) {
  RealTensor values = RealTensor::from_shape(words.shape());
  std::memcpy(values.data(), words.data(), words.size() * sizeof(Ring));
  return {std::move(values)};
}

}  // namespace mpcache
