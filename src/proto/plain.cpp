module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

Plain::Plain(int frac_bits) : frac_bits_(frac_bits) { FixedPoint check(frac_bits); }

Task<PlainShare> Plain::input(PartyId owner, std::optional<RingTensor> value, Shape shape) {
  if (!value)
    throw Error(ErrorCode::invalid_argument,
                "plain input from party " + std::to_string(owner) + ": no value given");
  if (shape_of(*value) != shape)
    throw Error(ErrorCode::invalid_argument, "plain input: value has shape " +
                                                 shape_string(shape_of(*value)) +
                                                 ", declared shape is " + shape_string(shape));
  co_return PlainShare{std::move(*value)};
}

Task<RingTensor> Plain::reveal(const Share& a) { co_return a.value; }

Task<std::optional<RingTensor>> Plain::reveal_to(PartyId, const Share& a) {
  co_return std::optional<RingTensor>(a.value);
}

Task<PlainShare> Plain::mul(const Share& a, const Share& b) { co_return PlainShare{ring_mul(a.value, b.value)}; }
Task<PlainShare> Plain::matmul(const Share& a, const Share& b) {
  co_return PlainShare{ring_matmul(a.value, b.value)};
}
void TruncationAudit::record(const RingTensor& before, std::source_location where) {
  std::string file = where.file_name();
  if (const auto slash = file.find_last_of('/'); slash != std::string::npos) file = file.substr(slash + 1);
  TruncationSite& site = sites[file + ":" + std::to_string(where.line())];
  double sum = 0;
  for (const Ring v : before) {
    const auto s = static_cast<std::int64_t>(v);
    // |x| in double; INT64_MIN's magnitude is 2^63 exactly.
    const double magnitude = s < 0 ? -static_cast<double>(s) : static_cast<double>(s);
    sum += magnitude + 1;
    site.max_abs = std::max(site.max_abs, magnitude);
  }
  site.expected_failures += sum * 0x1p-64;
  site.elements += before.size();
  ++site.calls;
}

double TruncationAudit::expected_failures() const {
  double total = 0;
  for (const auto& [where, site] : sites) total += site.expected_failures;
  return total;
}

RingTensor Plain::audited(const RingTensor& before, int bits, std::source_location where) const {
  if (audit_) audit_->record(before, where);
  return ring_shift_floor(before, bits);
}

Task<PlainShare> Plain::truncate(const Share& a, int bits, std::source_location where) {
  co_return PlainShare{audited(a.value, bits, where)};
}
Task<PlainShare> Plain::mul_trunc(const Share& a, const Share& b, int bits, std::source_location where) {
  co_return PlainShare{audited(ring_mul(a.value, b.value), bits < 0 ? frac_bits_ : bits, where)};
}
Task<PlainShare> Plain::matmul_trunc(const Share& a, const Share& b, std::source_location where) {
  co_return PlainShare{audited(ring_matmul(a.value, b.value), frac_bits_, where)};
}

}  // namespace mpcache

namespace mpcache {

Task<PlainBits> Plain::to_bits(const Share& a, int width) {
  if (width < 1 || width > ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "to_bits: width " + std::to_string(width) + " is outside [1, 64]");
  const Ring mask = width >= ring_bits ? ~Ring{0} : (Ring{1} << width) - 1;
  PlainBits out{a.value};
  for (auto& v : out.value) v &= mask;
  co_return out;
}
Task<PlainBits> Plain::bits_and(const Bits& x, const Bits& y) {
  co_return PlainBits{ring_and(x.value, y.value)};
}
Task<PlainShare> Plain::bit_to_arith(const Bits& x) {
  PlainShare out{x.value};
  for (auto& v : out.value) v &= 1;
  co_return out;
}
Task<RingTensor> Plain::reveal_bits(const Bits& x) { co_return x.value; }
Task<PlainShare> Plain::bit_dot(const Bits& b, const Share& x, int bits, std::source_location where) {
  require_same_shape(b.value, x.value, "plain bit_dot");
  Shape s = shape_of(x.value);
  if (s.empty() || s.back() == 0)
    throw Error(ErrorCode::invalid_argument, "plain bit_dot over an empty last axis, shape " + shape_string(s));
  RingTensor picked = x.value;
  for (std::size_t i = 0; i < picked.size(); ++i)
    if ((b.value.data()[i] & 1) == 0) picked.data()[i] = 0;
  const std::size_t k = s.back();
  s.back() = 1;
  RingTensor summed = ring_reshape(ring_weighted_sum_last(picked, std::vector<Ring>(k, Ring{1})), s);
  co_return PlainShare{bits > 0 ? audited(summed, bits, where) : std::move(summed)};
}
Task<PlainShare> Plain::dot_trunc(const Share& a, const Share& b, int bits, std::source_location where) {
  require_same_shape(a.value, b.value, "plain dot_trunc");
  const Shape s = shape_of(a.value);
  if (s.empty() || s.back() == 0)
    throw Error(ErrorCode::invalid_argument, "plain dot_trunc over an empty last axis, shape " + shape_string(s));
  RingTensor summed = ring_weighted_sum_last(ring_mul(a.value, b.value), std::vector<Ring>(s.back(), Ring{1}));
  co_return PlainShare{bits > 0 ? audited(summed, bits, where) : std::move(summed)};
}

}  // namespace mpcache
