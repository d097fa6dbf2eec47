// Ring Z_2^64 kernels. Plain loops over contiguous data: the compiler
// vectorises them, with no per-element indexing or allocation on hot paths.
// Matrix products and the element-wise add, sub, mul, xor and and go to
// ring_kernels.cpp (AVX-512 / AVX2 chosen at run time), split over the
// caller's ComputePool when one is given and the work is big.
module;
#include "ring_kernels.hpp"
module mpcache.core;
import mpcache.std;

namespace mpcache {

Shape shape_of(const RingTensor& t) { return Shape(t.shape().begin(), t.shape().end()); }

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

std::size_t element_count(const Shape& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void require_same_shape(const RingTensor& a, const RingTensor& b, const char* what) {
  if (a.dimension() != b.dimension() ||
      !std::equal(a.shape().begin(), a.shape().end(), b.shape().begin()))
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": shapes differ, " + shape_string(shape_of(a)) + " vs " +
                    shape_string(shape_of(b)));
}

RingTensor ring_zeros(const Shape& shape) {
  RingTensor t = RingTensor::from_shape(shape);
  std::fill(t.begin(), t.end(), Ring{0});
  return t;
}

namespace {

// Below these sizes a part is too small to pay for waking a thread (a few
// microseconds): element-wise parts of at least 64 Ki elements (512 KiB of
// each operand), products of at least 2^18 multiply-adds per part.
constexpr std::size_t elementwise_grain = std::size_t{1} << 16;
constexpr std::size_t matmul_grain = std::size_t{1} << 18;

// Rounds x up to a multiple of `to` (to > 0).
std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

using ZipKernel = void (*)(Ring*, const Ring*, const Ring*, std::size_t);

// out[i] = a[i] op b[i] by the SIMD kernel, in parts over the pool; part
// boundaries are whole cache lines. out may be a or b.
void zip_into(ComputePool* pool, ZipKernel kernel, Ring* out, const Ring* a, const Ring* b, std::size_t n) {
  const std::size_t parts = parts_for(pool, n, elementwise_grain);
  if (parts == 1) return kernel(out, a, b, n);
  const std::size_t step = round_up((n + parts - 1) / parts, 8);
  pool->run(parts, [&](std::size_t part) {
    const std::size_t begin = std::min(n, part * step), end = std::min(n, begin + step);
    kernel(out + begin, a + begin, b + begin, end - begin);
  });
}

RingTensor zip(const RingTensor& a, const RingTensor& b, const char* what, ZipKernel kernel, ComputePool* pool) {
  require_same_shape(a, b, what);
  RingTensor out = RingTensor::from_shape(a.shape());
  zip_into(pool, kernel, out.data(), a.data(), b.data(), a.size());
  return out;
}

void zip_inplace(RingTensor& acc, const RingTensor& b, const char* what, ZipKernel kernel, ComputePool* pool) {
  require_same_shape(acc, b, what);
  zip_into(pool, kernel, acc.data(), acc.data(), b.data(), acc.size());
}

// The overloads of the kernels that pick the CPU's best level.
constexpr ZipKernel add_kernel = &kernels::add, sub_kernel = &kernels::sub, mul_kernel = &kernels::mul,
                    xor_kernel = &kernels::xor_, and_kernel = &kernels::and_;

}  // namespace

RingTensor ring_add(const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  return zip(a, b, "ring_add", add_kernel, pool);
}
RingTensor ring_sub(const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  return zip(a, b, "ring_sub", sub_kernel, pool);
}
RingTensor ring_mul(const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  return zip(a, b, "ring_mul", mul_kernel, pool);
}
RingTensor ring_neg(const RingTensor& a) {
  RingTensor out = RingTensor::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) out.data()[i] = Ring{0} - a.data()[i];
  return out;
}
RingTensor ring_xor(const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  return zip(a, b, "ring_xor", xor_kernel, pool);
}
RingTensor ring_and(const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  return zip(a, b, "ring_and", and_kernel, pool);
}
void ring_xor_inplace(RingTensor& acc, const RingTensor& b, ComputePool* pool) {
  zip_inplace(acc, b, "ring_xor_inplace", xor_kernel, pool);
}
void ring_add_inplace(RingTensor& acc, const RingTensor& b, ComputePool* pool) {
  zip_inplace(acc, b, "ring_add_inplace", add_kernel, pool);
}
void ring_sub_inplace(RingTensor& acc, const RingTensor& b, ComputePool* pool) {
  zip_inplace(acc, b, "ring_sub_inplace", sub_kernel, pool);
}

namespace {
void check_matmul_shapes(const RingTensor& a, const RingTensor& b, const char* what) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": expected (m,k) x (k,n), got " + shape_string(shape_of(a)) +
                    " x " + shape_string(shape_of(b)));
}

// acc must be (m,n) for (m,k) x (k,n) operands.
void check_accumulator(const RingTensor& acc, std::size_t m, std::size_t n, const char* what) {
  if (acc.dimension() != 2 || acc.shape()[0] != m || acc.shape()[1] != n)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": accumulator is " +
                                                 shape_string(shape_of(acc)) + ", expected (" +
                                                 std::to_string(m) + "," + std::to_string(n) + ")");
}
}  // namespace

namespace {
// c (m x n) += a product, over the pool: kernel(row0, rows, col0, cols)
// adds one block of c. Rows while every part still gets the packed path's
// 64 rows or more (the prefill is bound by the multiplier, and each part
// packs its own panels of b); else blocks of whole 32-column tiles (the
// decode's 1 x k x n reads b once and is bound by memory: each thread
// streams its own columns of b).
template <class Kernel>
void split_matmul(ComputePool* pool, std::size_t m, std::size_t k, std::size_t n, Kernel&& kernel) {
  const std::size_t parts = parts_for(pool, m * k * n, matmul_grain);
  if (parts == 1) return kernel(0, m, 0, n);
  if (m / parts >= 64) {
    const std::size_t step = (m + parts - 1) / parts;
    pool->run(parts, [&](std::size_t part) {
      const std::size_t begin = std::min(m, part * step), end = std::min(m, begin + step);
      kernel(begin, end - begin, 0, n);
    });
    return;
  }
  const std::size_t step = round_up((n + parts - 1) / parts, 32);
  pool->run(parts, [&](std::size_t part) {
    const std::size_t begin = std::min(n, part * step), end = std::min(n, begin + step);
    kernel(0, m, begin, end - begin);
  });
}
}  // namespace

void ring_matmul_accumulate(RingTensor& acc, const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  check_matmul_shapes(a, b, "ring_matmul");
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  check_accumulator(acc, m, n, "ring_matmul_accumulate");
  const auto level = kernels::detected_kernel_level();
  Ring* c = acc.data();
  const Ring *pa = a.data(), *pb = b.data();
  split_matmul(pool, m, k, n, [&](std::size_t i, std::size_t rows, std::size_t j, std::size_t cols) {
    kernels::matmul_accumulate(level, c + i * n + j, n, pa + i * k, k, pb + j, n, rows, k, cols);
  });
}

void ring_matmul_accumulate_reference(RingTensor& acc, const RingTensor& a, const RingTensor& b) {
  check_matmul_shapes(a, b, "ring_matmul");
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  check_accumulator(acc, m, n, "ring_matmul_accumulate_reference");
  kernels::matmul_accumulate(kernels::KernelLevel::scalar, acc.data(), a.data(), b.data(), m, k, n);
}

void ring_matmul_rss3_accumulate(RingTensor& acc, const RingTensor& a0, const RingTensor& a1,
                                 const RingTensor& b0, const RingTensor& b1, ComputePool* pool) {
  check_matmul_shapes(a0, b0, "ring_matmul_rss3");
  require_same_shape(a0, a1, "ring_matmul_rss3 (left components)");
  require_same_shape(b0, b1, "ring_matmul_rss3 (right components)");
  ring_matmul_rss3_accumulate(acc, ring_matrix(a0), ring_matrix(a1), ring_matrix(b0), ring_matrix(b1), pool);
}

namespace {
std::string view_shape(const RingMatrixView& v) { return shape_string({v.rows, v.cols}); }
}  // namespace

void ring_matmul_rss3_accumulate(RingTensor& acc, const RingMatrixView& a0, const RingMatrixView& a1,
                                 const RingMatrixView& b0, const RingMatrixView& b1, ComputePool* pool) {
  if (a0.rows != a1.rows || a0.cols != a1.cols || b0.rows != b1.rows || b0.cols != b1.cols || a0.cols != b0.rows)
    throw Error(ErrorCode::invalid_argument, "ring_matmul_rss3: expected (m,k) x (k,n) in both components, got " +
                                                 view_shape(a0) + ", " + view_shape(a1) + " x " + view_shape(b0) +
                                                 ", " + view_shape(b1));
  const std::size_t m = a0.rows, k = a0.cols, n = b0.cols;
  check_accumulator(acc, m, n, "ring_matmul_rss3_accumulate");
  const auto level = kernels::detected_kernel_level();
  Ring* c = acc.data();
  split_matmul(pool, m, k, n, [&](std::size_t i, std::size_t rows, std::size_t j, std::size_t cols) {
    kernels::matmul_rss3_accumulate(level, c + i * n + j, n, a0.data + i * a0.stride, a1.data + i * a1.stride,
                                    a0.stride, b0.data + j, b1.data + j, b0.stride, rows, k, cols);
  });
}

namespace {
const RingTensor& require_matrix(const RingTensor& a, const char* what) {
  if (a.dimension() != 2)
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": needs a matrix, not shape " + shape_string(shape_of(a)));
  return a;
}
void require_range(std::size_t begin, std::size_t end, std::size_t size, const char* what, const char* axis) {
  if (begin > end || end > size)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": " + axis + " [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") outside " + std::to_string(size));
}
}  // namespace

RingMatrixView ring_matrix(const RingTensor& a) {
  require_matrix(a, "ring_matrix");
  return {a.data(), a.shape()[0], a.shape()[1], a.shape()[1]};
}

RingMatrixView ring_matrix_rows(const RingTensor& a, std::size_t begin, std::size_t end) {
  require_matrix(a, "ring_matrix_rows");
  const std::size_t n = a.shape()[1];
  require_range(begin, end, a.shape()[0], "ring_matrix_rows", "rows");
  return {a.data() + begin * n, end - begin, n, n};
}

RingMatrixView ring_matrix_columns(const RingTensor& a, std::size_t begin, std::size_t end) {
  require_matrix(a, "ring_matrix_columns");
  const std::size_t n = a.shape()[1];
  require_range(begin, end, n, "ring_matrix_columns", "columns");
  return {a.data() + begin, a.shape()[0], end - begin, n};
}

const char* ring_kernel_level() { return kernels::kernel_level_name(kernels::detected_kernel_level()); }

RingTensor ring_matmul(const RingTensor& a, const RingTensor& b, ComputePool* pool) {
  check_matmul_shapes(a, b, "ring_matmul");
  RingTensor out = ring_zeros({a.shape()[0], b.shape()[1]});
  ring_matmul_accumulate(out, a, b, pool);
  return out;
}

namespace {
void check_shift(int bits) {
  if (bits < 0 || bits >= ring_bits)
    throw Error(ErrorCode::invalid_argument,
                "shift by " + std::to_string(bits) + " bits is outside [0, 63]");
}
}  // namespace

RingTensor ring_shift_left(const RingTensor& a, int bits) {
  check_shift(bits);
  RingTensor out = RingTensor::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) out.data()[i] = a.data()[i] << bits;
  return out;
}

RingTensor ring_shift_right_logical(const RingTensor& a, int bits) {
  check_shift(bits);
  RingTensor out = RingTensor::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) out.data()[i] = a.data()[i] >> bits;
  return out;
}

RingTensor ring_shift_floor(const RingTensor& a, int bits) {
  check_shift(bits);
  RingTensor out = RingTensor::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i)
    out.data()[i] = static_cast<Ring>(static_cast<std::int64_t>(a.data()[i]) >> bits);
  return out;
}

RingTensor ring_shift_ceil(const RingTensor& a, int bits) {
  check_shift(bits);
  // floor plus one when any dropped bit is set: exact for every value, unlike
  // -floor(-x) which overflows at -2^63.
  const Ring low_mask = (Ring{1} << bits) - 1;
  RingTensor out = RingTensor::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Ring x = a.data()[i];
    out.data()[i] = static_cast<Ring>(static_cast<std::int64_t>(x) >> bits) + ((x & low_mask) != 0);
  }
  return out;
}

RingTensor ring_filled(const Shape& shape, Ring value) {
  RingTensor t = RingTensor::from_shape(shape);
  std::fill(t.begin(), t.end(), value);
  return t;
}

namespace {
void check_reshape(const RingTensor& a, const Shape& shape) {
  if (element_count(shape) != a.size())
    throw Error(ErrorCode::invalid_argument, "reshape " + shape_string(shape_of(a)) + " to " +
                                                 shape_string(shape) + ": element counts differ");
}
}  // namespace

RingTensor ring_reshape(const RingTensor& a, const Shape& shape) {
  check_reshape(a, shape);
  RingTensor out = RingTensor::from_shape(shape);
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}

RingTensor ring_reshape(RingTensor&& a, const Shape& shape) {
  check_reshape(a, shape);
  RingTensor out = std::move(a);
  out.reshape(shape);
  return out;
}

namespace {
std::size_t last_dim(const RingTensor& a, const char* what) {
  if (a.dimension() == 0)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": tensor has no axis");
  return a.shape().back();
}
}  // namespace

RingTensor ring_slice_last(const RingTensor& a, std::size_t begin, std::size_t end) {
  const std::size_t n = last_dim(a, "ring_slice_last");
  if (begin > end || end > n)
    throw Error(ErrorCode::invalid_argument, "ring_slice_last: [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") outside axis of " +
                                                 std::to_string(n));
  Shape shape = shape_of(a);
  shape.back() = end - begin;
  RingTensor out = RingTensor::from_shape(shape);
  const std::size_t rows = n ? a.size() / n : 0, w = end - begin;
  for (std::size_t r = 0; r < rows; ++r)
    std::copy(a.data() + r * n + begin, a.data() + r * n + end, out.data() + r * w);
  return out;
}

RingTensor ring_concat_last(const RingTensor& a, const RingTensor& b) {
  const std::size_t na = last_dim(a, "ring_concat_last"), nb = last_dim(b, "ring_concat_last");
  Shape sa = shape_of(a), sb = shape_of(b);
  sa.back() = sb.back() = 0;
  if (sa != sb)
    throw Error(ErrorCode::invalid_argument, "ring_concat_last: leading shapes differ, " +
                                                 shape_string(shape_of(a)) + " vs " +
                                                 shape_string(shape_of(b)));
  Shape shape = shape_of(a);
  shape.back() = na + nb;
  RingTensor out = RingTensor::from_shape(shape);
  const std::size_t rows = element_count(shape) / std::max<std::size_t>(na + nb, 1);
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy(a.data() + r * na, a.data() + (r + 1) * na, out.data() + r * (na + nb));
    std::copy(b.data() + r * nb, b.data() + (r + 1) * nb, out.data() + r * (na + nb) + na);
  }
  return out;
}

RingTensor ring_repeat_last(const RingTensor& a, std::size_t times) {
  Shape shape = shape_of(a);
  shape.push_back(times);
  RingTensor out = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < a.size(); ++i)
    std::fill(out.data() + i * times, out.data() + (i + 1) * times, a.data()[i]);
  return out;
}

RingTensor ring_take_last(const RingTensor& a, const std::vector<std::size_t>& index) {
  const std::size_t n = last_dim(a, "ring_take_last");
  for (auto i : index)
    if (i >= n)
      throw Error(ErrorCode::invalid_argument, "ring_take_last: index " + std::to_string(i) +
                                                   " outside axis of " + std::to_string(n));
  Shape shape = shape_of(a);
  shape.back() = index.size();
  RingTensor out = RingTensor::from_shape(shape);
  const std::size_t rows = n ? a.size() / n : 0, m = index.size();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t t = 0; t < m; ++t) out.data()[r * m + t] = a.data()[r * n + index[t]];
  return out;
}

RingTensor ring_sum_second_last(const RingTensor& a) {
  if (a.dimension() < 2)
    throw Error(ErrorCode::invalid_argument, "ring_sum_second_last: need 2 axes, got " +
                                                 shape_string(shape_of(a)));
  Shape shape = shape_of(a);
  const std::size_t k = shape.back(), n = shape[shape.size() - 2];
  shape.erase(shape.end() - 2);
  RingTensor out = ring_zeros(shape);
  const std::size_t outer = out.size() / std::max<std::size_t>(k, 1);
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < k; ++j) out.data()[o * k + j] += a.data()[(o * n + i) * k + j];
  return out;
}

RingTensor ring_bits_to_axis(const RingTensor& a, int n) {
  check_shift(n - 1);
  Shape shape = shape_of(a);
  shape.push_back(static_cast<std::size_t>(n));
  RingTensor out = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < a.size(); ++i)
    for (int t = 0; t < n; ++t) out.data()[i * n + t] = (a.data()[i] >> t) & 1;
  return out;
}

RingTensor ring_reverse_low_bits(const RingTensor& a, int n) {
  check_shift(n - 1);
  RingTensor out = RingTensor::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) {
    Ring r = 0;
    for (int t = 0; t < n; ++t) r |= ((a.data()[i] >> t) & 1) << (n - 1 - t);
    out.data()[i] = r;
  }
  return out;
}

RingTensor ring_weighted_sum_last(const RingTensor& a, const std::vector<Ring>& weights) {
  const std::size_t n = last_dim(a, "ring_weighted_sum_last");
  if (weights.size() != n)
    throw Error(ErrorCode::invalid_argument, "ring_weighted_sum_last: " +
                                                 std::to_string(weights.size()) +
                                                 " weights for an axis of " + std::to_string(n));
  Shape shape = shape_of(a);
  shape.pop_back();
  RingTensor out = ring_zeros(shape);
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t t = 0; t < n; ++t) out.data()[i] += weights[t] * a.data()[i * n + t];
  return out;
}

RingTensor ring_tile_rows(const RingTensor& a, const Shape& leading) {
  Shape shape = leading;
  shape.push_back(a.size());
  RingTensor out = RingTensor::from_shape(shape);
  const std::size_t rows = element_count(leading);
  for (std::size_t r = 0; r < rows; ++r) std::copy(a.begin(), a.end(), out.data() + r * a.size());
  return out;
}

RingTensor ring_sample(const Shape& shape, std::uint64_t seed) {
  RingTensor t = RingTensor::from_shape(shape);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;  // never zero
  for (auto& v : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = x;
  }
  return t;
}

std::span<const std::byte> ring_bytes(const RingTensor& t) {
  return {reinterpret_cast<const std::byte*>(t.data()), t.size() * sizeof(Ring)};
}

namespace {
void check_message_size(std::size_t bytes, const Shape& shape) {
  const std::size_t n = element_count(shape);
  if (bytes != n * sizeof(Ring))
    throw Error(ErrorCode::protocol, "expected " + std::to_string(n * sizeof(Ring)) +
                                         " bytes for a tensor of shape " + shape_string(shape) +
                                         ", got " + std::to_string(bytes));
}
}  // namespace

RingTensor ring_from_bytes(std::vector<std::byte>&& bytes, const Shape& shape) {
  check_message_size(bytes.size(), shape);
  return RingTensor::adopt_bytes(shape, std::move(bytes));
}

RingTensor ring_from_bytes(std::span<const std::byte> bytes, const Shape& shape) {
  check_message_size(bytes.size(), shape);
  const std::size_t n = element_count(shape);
  RingTensor t = RingTensor::from_shape(shape);
  if (n) std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace mpcache
