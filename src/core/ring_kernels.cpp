// Ring GEMM and element-wise kernels (see ring_kernels.hpp).
//
// One generic kernel is written with clang/GCC vector extensions and
// instantiated for AVX2 and AVX-512 inside functions that carry the target
// attribute: the generic code is always_inline, so it is compiled with the
// caller's instruction set. (Intrinsics would need the target attribute on
// every template, which cannot depend on a template parameter.) Helpers take
// vectors by reference: a vector passed by value to a function compiled
// without AVX changes the ABI, and clang rejects that.
#include "ring_kernels.hpp"

#include <algorithm>
#include <cstring>

namespace mpcache::kernels {

namespace {

using u64 = std::uint64_t;
using std::size_t;

// The reference loops. i-k-j order: the inner loop streams rows of b and c.
void matmul_scalar(u64* c, size_t ldc, const u64* a, size_t lda, const u64* b, size_t ldb, size_t m,
                   size_t k, size_t n) {
  for (size_t i = 0; i < m; ++i) {
    u64* crow = c + i * ldc;
    for (size_t p = 0; p < k; ++p) {
      const u64 aip = a[i * lda + p];
      const u64* brow = b + p * ldb;
      for (size_t j = 0; j < n; ++j) crow[j] += aip * brow[j];
    }
  }
}

void matmul_rss3_scalar(u64* c, size_t ldc, const u64* a0, const u64* a1, size_t lda, const u64* b0,
                        const u64* b1, size_t ldb, size_t m, size_t k, size_t n) {
  for (size_t i = 0; i < m; ++i) {
    u64* crow = c + i * ldc;
    for (size_t p = 0; p < k; ++p) {
      const u64 x = a0[i * lda + p], y = a1[i * lda + p];
      const u64 *r0 = b0 + p * ldb, *r1 = b1 + p * ldb;
      for (size_t j = 0; j < n; ++j) crow[j] += x * (r0[j] + r1[j]) + y * r0[j];
    }
  }
}

// Element-wise operations, on scalars (op) and on vectors in place (vop).
#define MPCACHE_ZIP_OP(Name, sym)                                            \
  struct Name {                                                              \
    static u64 op(u64 x, u64 y) { return x sym y; }                          \
    template <class V>                                                       \
    [[gnu::always_inline]] static void vop(V& x, const V& y) { x = x sym y; } \
  };
MPCACHE_ZIP_OP(Add, +)
MPCACHE_ZIP_OP(Sub, -)
MPCACHE_ZIP_OP(Mul, *)
MPCACHE_ZIP_OP(Xor, ^)
MPCACHE_ZIP_OP(And, &)
#undef MPCACHE_ZIP_OP

template <class Op>
void zip_scalar(u64* out, const u64* a, const u64* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::op(a[i], b[i]);
}

}  // namespace

#if defined(__x86_64__) || defined(__i386__)
#define MPCACHE_KERNELS_X86 1
#define MPCACHE_INLINE [[gnu::always_inline]] inline

namespace {

using v4u64 = u64 __attribute__((vector_size(32)));
using v8u64 = u64 __attribute__((vector_size(64)));

// Blocking shared by both instruction sets, measured on a Zen 5 core with
// the shapes listed at gemm() below.
struct Blocking {
  // Unpacked path: rows of b per pass over c. Each row of b is one
  // sequential stream; more than about 8 streams at once (b0 and b1 count
  // twice) read memory slower, but with 5 or more rows of a the kernel is
  // bound by multiplies and deeper passes save loads and stores of c.
  static constexpr size_t direct_depth(size_t rows, bool fused) {
    return rows >= 5 ? 64 : fused ? 4 : 8;
  }
  static constexpr size_t prefetch_ahead = 256;  // elements of b, per row (2 KiB)
  static constexpr size_t pack_min_rows = 64;    // pack b from this many rows of a
  static constexpr size_t block_rows = 128;      // rows of a per packed panel
};

// Instruction-set traits. A Splat is a broadcast element of a, an Operand a
// vector of b prepared for multiplication; mul_add does acc += a * b (low
// 64 bits). Tile shapes keep the accumulators and operands in registers.
struct Avx512 : Blocking {
  using vec = v8u64;
  static constexpr size_t lanes = 8;
  struct Splat { vec v; };
  struct Operand { vec v; };
  MPCACHE_INLINE static void splat(Splat& s, u64 x) { s.v = vec{} + x; }
  MPCACHE_INLINE static void prepare(Operand& o, const vec& v) { o.v = v; }
  MPCACHE_INLINE static void mul_add(vec& acc, const Splat& a, const Operand& b) {
    acc += a.v * b.v;
  }
  // 32 registers: rows x vectors accumulators plus a vector of b per column.
  static constexpr int packed_rows(bool) { return 4; }
  static constexpr int packed_vectors(bool) { return 4; }
  static constexpr int direct_vectors(int rows, bool fused) {
    return rows <= 1 ? 4 : fused ? 2 : 3;
  }
};

// AVX2 has no 64-bit multiply: with a = ah:al and b = bh:bl (32-bit halves),
// a*b mod 2^64 = al*bl + ((al*bh + ah*bl) << 32). Each product of two 32-bit
// halves is one vpmuludq (_mm256_mul_epu32; clang emits it because the
// operands' high halves are known zero). The halves of a are split once per
// broadcast and bh once per vector of b, shared by all rows of the tile.
struct Avx2 : Blocking {
  using vec = v4u64;
  static constexpr size_t lanes = 4;
  struct Splat { vec lo, hi; };
  struct Operand { vec v, hi; };
  MPCACHE_INLINE static void splat(Splat& s, u64 x) {
    s.lo = vec{} + (x & 0xffffffffu);
    s.hi = vec{} + (x >> 32);
  }
  MPCACHE_INLINE static void prepare(Operand& o, const vec& v) {
    o.v = v;
    o.hi = v >> 32;
  }
  MPCACHE_INLINE static void mul_add(vec& acc, const Splat& a, const Operand& b) {
    const vec lo = b.v & 0xffffffffu;
    acc += a.lo * lo + ((a.lo * b.hi + a.hi * lo) << 32);
  }
  // 16 registers: accumulators, two per operand (four when fused) and two
  // per splat; a few spills of broadcasts cost less than narrower tiles.
  static constexpr int packed_rows(bool fused) { return fused ? 2 : 4; }
  static constexpr int packed_vectors(bool) { return 2; }
  static constexpr int direct_vectors(int rows, bool fused) {
    return rows <= 1 && !fused ? 4 : 2;
  }
};

template <class V>
MPCACHE_INLINE void load(V& v, const u64* p) {
  std::memcpy(&v, p, sizeof v);  // unaligned, and no aliasing assumptions
}
template <class V>
MPCACHE_INLINE void store(u64* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}
// Prefetch `ahead` elements further on in a row of b; the address may lie
// past the end of b (a prefetch never faults), so it is computed as an integer.
MPCACHE_INLINE void prefetch(const u64* p, size_t ahead) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) +
                                                   ahead * sizeof(u64)));
}

// One block of the product: c (rows x cols) += a0 x (b0 + b1) + a1 x b0 over
// kc columns of a and rows of b; without Fused, c += a0 x b0.
struct Block {
  u64* c;
  size_t ldc;
  const u64 *a0, *a1;
  size_t lda;
  const u64 *b0, *b1;
  size_t ldb;

  Block rows_from(size_t i) const {
    Block r = *this;
    r.c += i * ldc;
    r.a0 += i * lda;
    r.a1 += i * lda;
    return r;
  }
  Block cols_from(size_t j) const {
    Block r = *this;
    r.c += j;
    r.b0 += j;
    r.b1 += j;
    return r;
  }
  Block depth_from(size_t p) const {  // columns of a, rows of b
    Block r = *this;
    r.a0 += p;
    r.a1 += p;
    r.b0 += p * ldb;
    r.b1 += p * ldb;
    return r;
  }
};

// The register tile: MR rows x NV vectors of c stay in registers for all kc
// steps, so c is loaded and stored once per tile, and each vector of b
// (and b0 + b1) is loaded once and used by all MR rows. Prefetch > 0 when
// b is read in place (software prefetch keeps up with the strided rows).
template <class I, int MR, int NV, bool Fused, size_t Prefetch = 0>
MPCACHE_INLINE void tile(const Block& o, size_t kc) {
  using vec = typename I::vec;
  constexpr size_t L = I::lanes;
  vec acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) load(acc[r][v], o.c + r * o.ldc + v * L);
  for (size_t p = 0; p < kc; ++p) {
    typename I::Operand s[NV]{}, t[NV]{};  // s = b0 (+ b1), t = b0
    if constexpr (Prefetch > 0)
      for (size_t v = 0; v < NV * L; v += 8) {  // one per cache line
        prefetch(o.b0 + p * o.ldb + v, Prefetch);
        if constexpr (Fused) prefetch(o.b1 + p * o.ldb + v, Prefetch);
      }
    for (int v = 0; v < NV; ++v) {
      vec x;
      load(x, o.b0 + p * o.ldb + v * L);
      if constexpr (Fused) {
        vec y;
        load(y, o.b1 + p * o.ldb + v * L);
        I::prepare(t[v], x);
        x += y;
      }
      I::prepare(s[v], x);
    }
    for (int r = 0; r < MR; ++r) {
      typename I::Splat a{};
      I::splat(a, o.a0[r * o.lda + p]);
      for (int v = 0; v < NV; ++v) I::mul_add(acc[r][v], a, s[v]);
      if constexpr (Fused) {
        I::splat(a, o.a1[r * o.lda + p]);
        for (int v = 0; v < NV; ++v) I::mul_add(acc[r][v], a, t[v]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store(o.c + r * o.ldc + v * L, acc[r][v]);
}

// Columns left over after the last whole vector.
template <bool Fused>
MPCACHE_INLINE void scalar_cols(const Block& o, size_t rows, size_t cols, size_t kc) {
  for (size_t i = 0; i < rows; ++i) {
    u64* crow = o.c + i * o.ldc;
    for (size_t p = 0; p < kc; ++p) {
      const u64 x = o.a0[i * o.lda + p];
      const u64* r0 = o.b0 + p * o.ldb;
      if constexpr (Fused) {
        const u64 y = o.a1[i * o.lda + p];
        const u64* r1 = o.b1 + p * o.ldb;
        for (size_t j = 0; j < cols; ++j) crow[j] += x * (r0[j] + r1[j]) + y * r0[j];
      } else {
        for (size_t j = 0; j < cols; ++j) crow[j] += x * r0[j];
      }
    }
  }
}

// MR rows across cols columns of b read in place: whole tiles, then single
// vectors, then scalars.
template <class I, int MR, bool Fused>
MPCACHE_INLINE void row_block(const Block& o, size_t cols, size_t kc) {
  constexpr int NV = I::direct_vectors(MR, Fused);
  constexpr size_t L = I::lanes, NR = NV * L;
  size_t j = 0;
  for (; j + NR <= cols; j += NR) tile<I, MR, NV, Fused, I::prefetch_ahead>(o.cols_from(j), kc);
  if constexpr (NV > 1)
    for (; j + L <= cols; j += L) tile<I, MR, 1, Fused>(o.cols_from(j), kc);
  if (j < cols) scalar_cols<Fused>(o.cols_from(j), MR, cols - j, kc);
}

// Any number of rows straight from b (no packing), 8 rows at a time, so that
// up to 8 rows (batched decoding) read each element of b once.
template <class I, bool Fused>
MPCACHE_INLINE void direct(Block o, size_t rows, size_t cols, size_t kc) {
  while (rows > 0) {
    const size_t r = std::min<size_t>(rows, 8);
    switch (r) {
#define MPCACHE_ROWS(R) \
  case R: row_block<I, R, Fused>(o, cols, kc); break;
      MPCACHE_ROWS(1) MPCACHE_ROWS(2) MPCACHE_ROWS(3) MPCACHE_ROWS(4)
      MPCACHE_ROWS(5) MPCACHE_ROWS(6) MPCACHE_ROWS(7) MPCACHE_ROWS(8)
#undef MPCACHE_ROWS
      default: break;
    }
    o = o.rows_from(r);
    rows -= r;
  }
}

// Rows of a packed panel (cols = NR): whole MR-row tiles, then the rest.
template <class I, int NV, bool Fused>
MPCACHE_INLINE void packed_rows(const Block& o, size_t rows, size_t kc) {
  constexpr int MR = I::packed_rows(Fused);
  size_t i = 0;
  for (; i + MR <= rows; i += MR) tile<I, MR, NV, Fused>(o.rows_from(i), kc);
  const Block rest = o.rows_from(i);
  switch (rows - i) {
#define MPCACHE_ROWS(R) \
  case R: if constexpr (R < MR) tile<I, R, NV, Fused>(rest, kc); break;
    MPCACHE_ROWS(1) MPCACHE_ROWS(2) MPCACHE_ROWS(3) MPCACHE_ROWS(4)
    MPCACHE_ROWS(5) MPCACHE_ROWS(6) MPCACHE_ROWS(7)
#undef MPCACHE_ROWS
    default: break;
  }
  static_assert(MR <= 8, "packed_rows handles remainders of up to 7 rows");
}

constexpr size_t panel_elements = 4096;  // 32 KiB of b per panel: fits L1 with room for a

// c (m x n) += a x b, blocked for the cache. Tuned on GPT-2 shapes: decode
// (1..8 x 768) x (768 x 768 | 3072 | 50257) and (1 x 3072) x (3072 x 768),
// prefill (512 x 768) x (768 x 768 | 3072).
// * Fewer than pack_min_rows rows (decode, small batches): b is read in
//   place in passes of direct_depth rows, c tiles stay in registers across
//   a pass, and up to 8 rows share each load of b. Decode is bound by
//   reading b from memory: these passes read it at the speed of a plain
//   streaming loop.
// * More rows (prefill): copy a kc x NR panel of b (kc rows, NR columns) to
//   a contiguous stack buffer, where it stays in L1 (rows of b a multiple of
//   4 KiB apart would alias in L1), and run a block of rows of a over it;
//   this is bound by the multiplier. Columns beyond the last whole panel use
//   the unpacked path.
template <class I, bool Fused>
MPCACHE_INLINE void gemm(const Block& all, size_t m, size_t k, size_t n) {
  if (m == 0 || k == 0 || n == 0) return;  // empty inputs may be null pointers
  if (m < I::pack_min_rows) {
    const size_t depth = I::direct_depth(m, Fused);
    for (size_t p = 0; p < k; p += depth)
      direct<I, Fused>(all.depth_from(p), m, n, std::min(depth, k - p));
    return;
  }
  constexpr int NV = I::packed_vectors(Fused);
  constexpr size_t NR = NV * I::lanes;
  constexpr size_t KC = panel_elements / NR / (Fused ? 2 : 1);
  alignas(64) u64 panel[panel_elements];
  const size_t n_panels = n - n % NR;
  for (size_t p = 0; p < k; p += KC) {
    const size_t kc = std::min(KC, k - p);
    const Block depth = all.depth_from(p);
    for (size_t i = 0; i < m; i += I::block_rows) {
      const size_t rows = std::min(I::block_rows, m - i);
      const Block blk = depth.rows_from(i);
      for (size_t j = 0; j < n_panels; j += NR) {
        u64* p0 = panel;
        u64* p1 = panel + KC * NR;
        for (size_t q = 0; q < kc; ++q) {
          // The rows are far apart: fetch the next panel's lines meanwhile.
          for (size_t v = 0; v < NR; v += 8) {
            prefetch(blk.b0 + q * blk.ldb + j + v, NR);
            if constexpr (Fused) prefetch(blk.b1 + q * blk.ldb + j + v, NR);
          }
          std::memcpy(p0 + q * NR, blk.b0 + q * blk.ldb + j, NR * sizeof(u64));
          if constexpr (Fused) std::memcpy(p1 + q * NR, blk.b1 + q * blk.ldb + j, NR * sizeof(u64));
        }
        Block packed = blk;
        packed.c += j;
        packed.b0 = p0;
        packed.b1 = p1;
        packed.ldb = NR;
        packed_rows<I, NV, Fused>(packed, rows, kc);
      }
      if (n_panels < n) direct<I, Fused>(blk.cols_from(n_panels), rows, n - n_panels, kc);
    }
  }
}

// Element-wise: whole vectors, then the scalar tail. A vector multiply of
// 64-bit lanes is vpmullq with AVX-512 DQ; with AVX2 clang emits the
// vpmuludq sequence described at Avx2 above.
template <class I, class Op>
MPCACHE_INLINE void zip(u64* out, const u64* a, const u64* b, size_t n) {
  using vec = typename I::vec;
  constexpr size_t L = I::lanes;
  size_t i = 0;
  for (; i + L <= n; i += L) {
    vec x, y;
    load(x, a + i);
    load(y, b + i);
    Op::vop(x, y);
    store(out + i, x);
  }
  for (; i < n; ++i) out[i] = Op::op(a[i], b[i]);
}

}  // namespace
#endif

// The instantiations, compiled for each instruction set.
namespace {

#ifdef MPCACHE_KERNELS_X86
#define MPCACHE_AVX2 [[gnu::target("avx2")]]
#define MPCACHE_AVX512 [[gnu::target("avx2,avx512f,avx512dq")]]
MPCACHE_AVX2 void matmul_avx2(const Block& o, size_t m, size_t k, size_t n) {
  gemm<Avx2, false>(o, m, k, n);  // a1, b1 unused
}
MPCACHE_AVX512 void matmul_avx512(const Block& o, size_t m, size_t k, size_t n) {
  gemm<Avx512, false>(o, m, k, n);  // a1, b1 unused
}
MPCACHE_AVX2 void matmul_rss3_avx2(const Block& o, size_t m, size_t k, size_t n) {
  gemm<Avx2, true>(o, m, k, n);
}
MPCACHE_AVX512 void matmul_rss3_avx512(const Block& o, size_t m, size_t k, size_t n) {
  gemm<Avx512, true>(o, m, k, n);
}
template <class Op>
MPCACHE_AVX2 void zip_avx2(u64* out, const u64* a, const u64* b, size_t n) {
  zip<Avx2, Op>(out, a, b, n);
}
template <class Op>
MPCACHE_AVX512 void zip_avx512(u64* out, const u64* a, const u64* b, size_t n) {
  zip<Avx512, Op>(out, a, b, n);
}

// The requested level, lowered to what the CPU supports.
KernelLevel usable(KernelLevel level) noexcept {
  return std::min(level, detected_kernel_level());
}
#endif

template <class Op>
void zip_at(KernelLevel level, u64* out, const u64* a, const u64* b, size_t n) {
#ifdef MPCACHE_KERNELS_X86
  switch (usable(level)) {
    case KernelLevel::avx512: return zip_avx512<Op>(out, a, b, n);
    case KernelLevel::avx2: return zip_avx2<Op>(out, a, b, n);
    case KernelLevel::scalar: break;
  }
#else
  (void)level;
#endif
  zip_scalar<Op>(out, a, b, n);
}

}  // namespace

KernelLevel detected_kernel_level() noexcept {
#ifdef MPCACHE_KERNELS_X86
  // __builtin_cpu_supports also checks that the OS saves the wide registers.
  static const KernelLevel level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
      return KernelLevel::avx512;
    if (__builtin_cpu_supports("avx2")) return KernelLevel::avx2;
    return KernelLevel::scalar;
  }();
  return level;
#else
  return KernelLevel::scalar;
#endif
}

const char* kernel_level_name(KernelLevel level) noexcept {
  switch (level) {
    case KernelLevel::scalar: return "scalar";
    case KernelLevel::avx2: return "avx2";
    case KernelLevel::avx512: return "avx512";
  }
  return "unknown";
}

void matmul_accumulate(KernelLevel level, u64* c, size_t ldc, const u64* a, size_t lda,
                       const u64* b, size_t ldb, size_t m, size_t k, size_t n) {
#ifdef MPCACHE_KERNELS_X86
  const Block o{c, ldc, a, a, lda, b, b, ldb};
  switch (usable(level)) {
    case KernelLevel::avx512: return matmul_avx512(o, m, k, n);
    case KernelLevel::avx2: return matmul_avx2(o, m, k, n);
    case KernelLevel::scalar: break;
  }
#else
  (void)level;
#endif
  matmul_scalar(c, ldc, a, lda, b, ldb, m, k, n);
}

void matmul_accumulate(KernelLevel level, u64* c, const u64* a, const u64* b, size_t m, size_t k,
                       size_t n) {
  matmul_accumulate(level, c, n, a, k, b, n, m, k, n);
}

void matmul_accumulate(u64* c, const u64* a, const u64* b, size_t m, size_t k, size_t n) {
  matmul_accumulate(detected_kernel_level(), c, a, b, m, k, n);
}

void matmul_rss3_accumulate(KernelLevel level, u64* c, size_t ldc, const u64* a0, const u64* a1,
                            size_t lda, const u64* b0, const u64* b1, size_t ldb, size_t m,
                            size_t k, size_t n) {
#ifdef MPCACHE_KERNELS_X86
  const Block o{c, ldc, a0, a1, lda, b0, b1, ldb};
  switch (usable(level)) {
    case KernelLevel::avx512: return matmul_rss3_avx512(o, m, k, n);
    case KernelLevel::avx2: return matmul_rss3_avx2(o, m, k, n);
    case KernelLevel::scalar: break;
  }
#else
  (void)level;
#endif
  matmul_rss3_scalar(c, ldc, a0, a1, lda, b0, b1, ldb, m, k, n);
}

void matmul_rss3_accumulate(KernelLevel level, u64* c, const u64* a0, const u64* a1,
                            const u64* b0, const u64* b1, size_t m, size_t k, size_t n) {
  matmul_rss3_accumulate(level, c, n, a0, a1, k, b0, b1, n, m, k, n);
}

void matmul_rss3_accumulate(u64* c, const u64* a0, const u64* a1, const u64* b0, const u64* b1,
                            size_t m, size_t k, size_t n) {
  matmul_rss3_accumulate(detected_kernel_level(), c, a0, a1, b0, b1, m, k, n);
}

#define MPCACHE_ZIP_API(name, Op)                                                          \
  void name(KernelLevel level, u64* out, const u64* a, const u64* b, size_t n) {           \
    zip_at<Op>(level, out, a, b, n);                                                       \
  }                                                                                        \
  void name(u64* out, const u64* a, const u64* b, size_t n) {                              \
    zip_at<Op>(detected_kernel_level(), out, a, b, n);                                     \
  }
MPCACHE_ZIP_API(add, Add)
MPCACHE_ZIP_API(sub, Sub)
MPCACHE_ZIP_API(mul, Mul)
MPCACHE_ZIP_API(xor_, Xor)
MPCACHE_ZIP_API(and_, And)
#undef MPCACHE_ZIP_API

}  // namespace mpcache::kernels
