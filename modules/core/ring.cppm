// The ring Z_2^64 on our tensors (:tensor). Every share and every clear-text
// fixed-point value is a RingTensor; arithmetic wraps modulo 2^64 by design
// (unsigned overflow is defined), signed views are two's complement.
//
// Functions that take a ComputePool* split big work over the caller's pool
// (see :compute_pool); with nullptr, or below a size threshold, they run on
// the calling thread. The result is the same bit for bit either way.
export module mpcache.core:ring;
import mpcache.std;
import :compute_pool;
export import :tensor;

export namespace mpcache {

using Ring = std::uint64_t;
inline constexpr int ring_bits = 64;
using RingTensor = Tensor<Ring>;

// Bytes per word on the wire when only its low `low_bits` bits matter
// (ceil(low_bits / 8); whole words from ring_bits up): what the backends'
// send and recv move (proto's wire.hpp), and what their cost models count.
constexpr std::size_t bytes_per_word(int low_bits) {
  return low_bits >= ring_bits ? sizeof(Ring) : static_cast<std::size_t>((low_bits + 7) / 8);
}

Shape shape_of(const RingTensor& t);
std::string shape_string(const Shape& shape);
std::size_t element_count(const Shape& shape);

// Throws Error(invalid_argument) naming `what` when the shapes differ.
void require_same_shape(const RingTensor& a, const RingTensor& b, const char* what);

RingTensor ring_zeros(const Shape& shape);
RingTensor ring_add(const RingTensor& a, const RingTensor& b, ComputePool* pool = nullptr);
RingTensor ring_sub(const RingTensor& a, const RingTensor& b, ComputePool* pool = nullptr);
RingTensor ring_neg(const RingTensor& a);
RingTensor ring_mul(const RingTensor& a, const RingTensor& b, ComputePool* pool = nullptr);  // elementwise
void ring_add_inplace(RingTensor& acc, const RingTensor& b, ComputePool* pool = nullptr);
void ring_sub_inplace(RingTensor& acc, const RingTensor& b, ComputePool* pool = nullptr);

// Bitwise word operations (boolean sharing, bit-parallel over 64 positions).
RingTensor ring_xor(const RingTensor& a, const RingTensor& b, ComputePool* pool = nullptr);
RingTensor ring_and(const RingTensor& a, const RingTensor& b, ComputePool* pool = nullptr);
void ring_xor_inplace(RingTensor& acc, const RingTensor& b, ComputePool* pool = nullptr);
RingTensor ring_shift_left(const RingTensor& a, int bits);
RingTensor ring_shift_right_logical(const RingTensor& a, int bits);

// (m,k) x (k,n) -> (m,n), wrapping. Both operands must be 2-D.
RingTensor ring_matmul(const RingTensor& a, const RingTensor& b, ComputePool* pool = nullptr);
// acc += a x b, shapes as above.
void ring_matmul_accumulate(RingTensor& acc, const RingTensor& a, const RingTensor& b,
                            ComputePool* pool = nullptr);
// acc += a0 x (b0 + b1) + a1 x b0 in one pass over b (the rss3 local product
// of two replicated shares); a0, a1 (m,k), b0, b1 (k,n), acc (m,n).
void ring_matmul_rss3_accumulate(RingTensor& acc, const RingTensor& a0, const RingTensor& a1,
                                 const RingTensor& b0, const RingTensor& b1,
                                 ComputePool* pool = nullptr);
// A matrix read in place inside a tensor's buffer: rows x cols elements,
// row r at data + r * stride. Products over views use a block of rows or of
// columns without copying it out first.
struct RingMatrixView {
  const Ring* data = nullptr;
  std::size_t rows = 0, cols = 0, stride = 0;
};
// All of a 2-D tensor, its rows [begin, end), or its columns [begin, end);
// Error(invalid_argument) for other ranks or a range outside the matrix.
RingMatrixView ring_matrix(const RingTensor& a);
RingMatrixView ring_matrix_rows(const RingTensor& a, std::size_t begin, std::size_t end);
RingMatrixView ring_matrix_columns(const RingTensor& a, std::size_t begin, std::size_t end);
// ring_matmul_rss3_accumulate over views (the views must not overlap acc).
void ring_matmul_rss3_accumulate(RingTensor& acc, const RingMatrixView& a0, const RingMatrixView& a1,
                                 const RingMatrixView& b0, const RingMatrixView& b1, ComputePool* pool = nullptr);
// The scalar i-k-j loop that the SIMD kernels are tested against, kept as
// the reference: acc += a x b (benches time it beside the kernels).
void ring_matmul_accumulate_reference(RingTensor& acc, const RingTensor& a, const RingTensor& b);
// Which SIMD level the ring kernels run at on this CPU: "avx512", "avx2" or
// "scalar" (chosen at run time; the build stays portable).
const char* ring_kernel_level();

// Arithmetic (sign-extending) shift: floor(x / 2^bits) on the signed view.
RingTensor ring_shift_floor(const RingTensor& a, int bits);
// ceil(x / 2^bits) on the signed view.
RingTensor ring_shift_ceil(const RingTensor& a, int bits);

// Deterministic pseudo-random ring elements (xorshift64) for test data,
// benchmark inputs and random weights. Not cryptographic: secrets come from
// the PRG in mpcache.proto.
RingTensor ring_sample(const Shape& shape, std::uint64_t seed);

// Layout helpers on the last axis (shape (..., n)); results are contiguous.
RingTensor ring_reshape(const RingTensor& a, const Shape& shape);
// The same of a tensor no longer needed: its buffer is moved, not copied.
RingTensor ring_reshape(RingTensor&& a, const Shape& shape);
RingTensor ring_slice_last(const RingTensor& a, std::size_t begin, std::size_t end);
RingTensor ring_concat_last(const RingTensor& a, const RingTensor& b);
// Every element repeated `times` along a new last axis: (..., n) -> (..., n, times).
RingTensor ring_repeat_last(const RingTensor& a, std::size_t times);
RingTensor ring_filled(const Shape& shape, Ring value);
// out[..., t] = a[..., index[t]] (a public gather/permutation on the last axis).
RingTensor ring_take_last(const RingTensor& a, const std::vector<std::size_t>& index);
// Bits 0..n-1 of every word spread on a new last axis (0 or 1 each).
RingTensor ring_bits_to_axis(const RingTensor& a, int n);
// Bits 0..n-1 of every word in reverse order (bit t -> bit n-1-t); higher bits cleared.
RingTensor ring_reverse_low_bits(const RingTensor& a, int n);
// out[...] = sum_t weights[t] * a[..., t] (wrapping).
RingTensor ring_weighted_sum_last(const RingTensor& a, const std::vector<Ring>& weights);
// a (n) repeated as rows: shape + (n).
RingTensor ring_tile_rows(const RingTensor& a, const Shape& leading);
// Sum over the second-to-last axis: (..., n, k) -> (..., k).
RingTensor ring_sum_second_last(const RingTensor& a);

// Raw bytes of a tensor (little-endian host order) and back, for messages.
std::span<const std::byte> ring_bytes(const RingTensor& t);
RingTensor ring_from_bytes(std::span<const std::byte> bytes, const Shape& shape);
// A received message's bytes become the tensor's buffer (no copy).
RingTensor ring_from_bytes(std::vector<std::byte>&& bytes, const Shape& shape);

}  // namespace mpcache
