// Ring Z_2^64 kernels with run-time CPU dispatch, compiled in an ordinary
// (non-module) translation unit. Every level computes the same values: all
// arithmetic wraps mod 2^64, so any summation order gives the exact result.
// The scalar level is the reference loop the tests compare with.
//
// Matrices are dense row-major uint64_t arrays. Nothing here allocates,
// starts threads or keeps mutable state; the packed matmul path uses 32 KiB
// of stack.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mpcache::kernels {

enum class KernelLevel { scalar, avx2, avx512 };

// The best level this CPU (and OS) supports; avx512 needs AVX-512 F and DQ.
KernelLevel detected_kernel_level() noexcept;
const char* kernel_level_name(KernelLevel level) noexcept;

// The functions below take a level; one above detected_kernel_level() runs
// at the detected level instead (never an illegal instruction).

// c += a x b, with a (m x k), b (k x n), c (m x n). c must not overlap a or b.
void matmul_accumulate(KernelLevel level, std::uint64_t* c, const std::uint64_t* a,
                       const std::uint64_t* b, std::size_t m, std::size_t k, std::size_t n);
void matmul_accumulate(std::uint64_t* c, const std::uint64_t* a, const std::uint64_t* b,
                       std::size_t m, std::size_t k, std::size_t n);

// The RSS3 local product in one pass: c += a0 x (b0 + b1) + a1 x b0, with
// a0, a1 (m x k) and b0, b1 (k x n). c must not overlap the inputs.
void matmul_rss3_accumulate(KernelLevel level, std::uint64_t* c, const std::uint64_t* a0,
                            const std::uint64_t* a1, const std::uint64_t* b0,
                            const std::uint64_t* b1, std::size_t m, std::size_t k,
                            std::size_t n);
void matmul_rss3_accumulate(std::uint64_t* c, const std::uint64_t* a0, const std::uint64_t* a1,
                            const std::uint64_t* b0, const std::uint64_t* b1, std::size_t m,
                            std::size_t k, std::size_t n);

// The same on blocks of larger row-major matrices, whose rows are ldc, lda
// and ldb elements apart (the forms above pass n, k and n): a compute pool
// gives each thread a block of rows or of columns of c.
void matmul_accumulate(KernelLevel level, std::uint64_t* c, std::size_t ldc, const std::uint64_t* a,
                       std::size_t lda, const std::uint64_t* b, std::size_t ldb, std::size_t m,
                       std::size_t k, std::size_t n);
void matmul_rss3_accumulate(KernelLevel level, std::uint64_t* c, std::size_t ldc,
                            const std::uint64_t* a0, const std::uint64_t* a1, std::size_t lda,
                            const std::uint64_t* b0, const std::uint64_t* b1, std::size_t ldb,
                            std::size_t m, std::size_t k, std::size_t n);

// Element-wise over n elements: out[i] = a[i] op b[i]. out may be a or b
// (the same pointer), but must not partially overlap them.
void add(KernelLevel level, std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b,
         std::size_t n);
void sub(KernelLevel level, std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b,
         std::size_t n);
void mul(KernelLevel level, std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b,
         std::size_t n);
void xor_(KernelLevel level, std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b,
          std::size_t n);
void and_(KernelLevel level, std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b,
          std::size_t n);
void add(std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b, std::size_t n);
void sub(std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b, std::size_t n);
void mul(std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b, std::size_t n);
void xor_(std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b, std::size_t n);
void and_(std::uint64_t* out, const std::uint64_t* a, const std::uint64_t* b, std::size_t n);

}  // namespace mpcache::kernels
