// Every kernel level the CPU supports must give exactly the scalar
// reference's values, on random data covering the whole ring and on shapes
// that exercise each tail and blocking path.
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ring_kernels.hpp"

namespace {

using mpcache::kernels::KernelLevel;
namespace kernels = mpcache::kernels;
using Vec = std::vector<std::uint64_t>;

// xorshift64, with the ring's edge values mixed in.
struct Random {
  std::uint64_t state;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  std::uint64_t value() {
    static constexpr std::array<std::uint64_t, 6> edges = {
        0, 1, ~std::uint64_t{0}, std::uint64_t{1} << 63, 0xffffffffu, std::uint64_t{1} << 32};
    const std::uint64_t r = next();
    return r % 8 == 0 ? edges[(r >> 8) % edges.size()] : next();
  }
  Vec vec(std::size_t n) {
    Vec v(n);
    for (auto& x : v) x = value();
    return v;
  }
};

// The levels to compare with scalar: those this CPU runs (avx512 implies avx2).
std::vector<KernelLevel> fast_levels() {
  std::vector<KernelLevel> out;
  const KernelLevel top = kernels::detected_kernel_level();
  if (top >= KernelLevel::avx2) out.push_back(KernelLevel::avx2);
  if (top >= KernelLevel::avx512) out.push_back(KernelLevel::avx512);
  return out;
}

struct Dims {
  std::size_t m, k, n;
};

std::string name(KernelLevel level, Dims d) {
  return std::string(kernels::kernel_level_name(level)) + " " + std::to_string(d.m) + "x" +
         std::to_string(d.k) + "x" + std::to_string(d.n);
}

std::vector<Dims> shapes() {
  std::vector<Dims> out = {{0, 0, 0},  {0, 5, 7},    {3, 0, 7},     {3, 5, 0},   {1, 1, 1},
                           {3, 5, 7},  {1, 17, 33},  {7, 129, 515}, {8, 64, 40}, {9, 33, 70},
                           {12, 7, 96}, {20, 300, 77}, {131, 200, 45}};
  // Columns that are not a multiple of any vector width, with row counts
  // for the unpacked path (1 to 17: blocks of up to 8 rows and every
  // remainder) and the packed one (64 and more: every remainder of a tile).
  for (std::size_t n = 1; n <= 17; ++n) {
    for (std::size_t m = 1; m <= 17; ++m) out.push_back({m, 11, n});
    for (std::size_t m = 64; m <= 71; ++m) out.push_back({m, 11, n});
  }
  // Packed panels with column tails, and depths beyond one panel.
  for (std::size_t m = 64; m <= 71; ++m) {
    out.push_back({m, 300, 70});
    out.push_back({m, 20, 64});
  }
  return out;
}

// c is followed by guard elements that no kernel may touch.
constexpr std::size_t guard = 9;

Vec with_guard(Vec c) {
  c.resize(c.size() + guard, 0x5a5a5a5a5a5a5a5au);
  return c;
}

}  // namespace

TEST_CASE("ring kernels: the scalar level is the naive triple loop") {
  Random rng{0x9e3779b97f4a7c15u};
  const Dims d{4, 9, 6};
  const Vec a = rng.vec(d.m * d.k), b = rng.vec(d.k * d.n), c0 = rng.vec(d.m * d.n);
  Vec c = c0;
  kernels::matmul_accumulate(KernelLevel::scalar, c.data(), a.data(), b.data(), d.m, d.k, d.n);
  for (std::size_t i = 0; i < d.m; ++i)
    for (std::size_t j = 0; j < d.n; ++j) {
      std::uint64_t want = c0[i * d.n + j];
      for (std::size_t p = 0; p < d.k; ++p) want += a[i * d.k + p] * b[p * d.n + j];
      CHECK(c[i * d.n + j] == want);
    }
}

TEST_CASE("ring kernels: level names and detection") {
  CHECK(std::string(kernels::kernel_level_name(KernelLevel::scalar)) == "scalar");
  CHECK(std::string(kernels::kernel_level_name(KernelLevel::avx2)) == "avx2");
  CHECK(std::string(kernels::kernel_level_name(KernelLevel::avx512)) == "avx512");
  CHECK(kernels::detected_kernel_level() == kernels::detected_kernel_level());
  MESSAGE("detected kernel level: "
          << kernels::kernel_level_name(kernels::detected_kernel_level()));
}

TEST_CASE("ring kernels: matmul equals the scalar level exactly") {
  Random rng{42};
  for (const Dims d : shapes()) {
    const Vec a = rng.vec(d.m * d.k), b = rng.vec(d.k * d.n), c0 = with_guard(rng.vec(d.m * d.n));
    Vec want = c0;
    kernels::matmul_accumulate(KernelLevel::scalar, want.data(), a.data(), b.data(), d.m, d.k,
                               d.n);
    for (const KernelLevel level : fast_levels()) {
      CAPTURE(name(level, d));
      Vec got = c0;
      kernels::matmul_accumulate(level, got.data(), a.data(), b.data(), d.m, d.k, d.n);
      CHECK(got == want);
    }
    Vec got = c0;  // the detected level
    kernels::matmul_accumulate(got.data(), a.data(), b.data(), d.m, d.k, d.n);
    CHECK(got == want);
  }
}

TEST_CASE("ring kernels: fused rss3 matmul equals the two-call form") {
  Random rng{7};
  for (const Dims d : shapes()) {
    const Vec a0 = rng.vec(d.m * d.k), a1 = rng.vec(d.m * d.k);
    const Vec b0 = rng.vec(d.k * d.n), b1 = rng.vec(d.k * d.n);
    const Vec c0 = with_guard(rng.vec(d.m * d.n));
    // Today's rss3: c += a0 x (b0 + b1), then c += a1 x b0.
    Vec sum(b0.size());
    kernels::add(KernelLevel::scalar, sum.data(), b0.data(), b1.data(), sum.size());
    Vec want = c0;
    kernels::matmul_accumulate(KernelLevel::scalar, want.data(), a0.data(), sum.data(), d.m, d.k,
                               d.n);
    kernels::matmul_accumulate(KernelLevel::scalar, want.data(), a1.data(), b0.data(), d.m, d.k,
                               d.n);
    std::vector<KernelLevel> levels = fast_levels();
    levels.insert(levels.begin(), KernelLevel::scalar);
    for (const KernelLevel level : levels) {
      CAPTURE(name(level, d));
      Vec got = c0;
      kernels::matmul_rss3_accumulate(level, got.data(), a0.data(), a1.data(), b0.data(),
                                      b1.data(), d.m, d.k, d.n);
      CHECK(got == want);
    }
    Vec got = c0;
    kernels::matmul_rss3_accumulate(got.data(), a0.data(), a1.data(), b0.data(), b1.data(), d.m,
                                    d.k, d.n);
    CHECK(got == want);
  }
}

TEST_CASE("ring kernels: element-wise operations equal the scalar expressions") {
  using Fn = void (*)(KernelLevel, std::uint64_t*, const std::uint64_t*, const std::uint64_t*,
                      std::size_t);
  struct Op {
    const char* name;
    Fn fn;
    std::uint64_t (*want)(std::uint64_t, std::uint64_t);
  };
  const std::array<Op, 5> ops = {{
      {"add", kernels::add, [](std::uint64_t x, std::uint64_t y) { return x + y; }},
      {"sub", kernels::sub, [](std::uint64_t x, std::uint64_t y) { return x - y; }},
      {"mul", kernels::mul, [](std::uint64_t x, std::uint64_t y) { return x * y; }},
      {"xor", kernels::xor_, [](std::uint64_t x, std::uint64_t y) { return x ^ y; }},
      {"and", kernels::and_, [](std::uint64_t x, std::uint64_t y) { return x & y; }},
  }};
  std::vector<KernelLevel> levels = fast_levels();
  levels.insert(levels.begin(), KernelLevel::scalar);
  Random rng{99};
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 33; ++n) sizes.push_back(n);
  sizes.push_back(1000);
  for (const Op& op : ops)
    for (const KernelLevel level : levels)
      for (const std::size_t n : sizes) {
        CAPTURE(op.name);
        CAPTURE(kernels::kernel_level_name(level));
        CAPTURE(n);
        const Vec a = rng.vec(n), b = rng.vec(n);
        Vec want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = op.want(a[i], b[i]);
        Vec out = with_guard(Vec(n));
        op.fn(level, out.data(), a.data(), b.data(), n);
        CHECK(out == with_guard(want));
        Vec in_place = a;  // out aliases an input
        op.fn(level, in_place.data(), in_place.data(), b.data(), n);
        CHECK(in_place == want);
        in_place = b;
        op.fn(level, in_place.data(), a.data(), in_place.data(), n);
        CHECK(in_place == want);
      }
  Vec out(5);  // the detected-level overloads
  const Vec a = {1, 2, 3, ~std::uint64_t{0}, std::uint64_t{1} << 63}, b = {5, 6, 7, 2, 3};
  kernels::add(out.data(), a.data(), b.data(), 5);
  CHECK(out == Vec{6, 8, 10, 1, std::uint64_t{1} << 63 | 3});
  kernels::sub(out.data(), a.data(), b.data(), 5);
  CHECK(out == Vec{~std::uint64_t{3}, ~std::uint64_t{3}, ~std::uint64_t{3},
                   ~std::uint64_t{2}, (std::uint64_t{1} << 63) - 3});
  kernels::mul(out.data(), a.data(), b.data(), 5);
  CHECK(out == Vec{5, 12, 21, ~std::uint64_t{1}, std::uint64_t{1} << 63});
  kernels::xor_(out.data(), a.data(), b.data(), 5);
  CHECK(out == Vec{4, 4, 4, ~std::uint64_t{2}, std::uint64_t{1} << 63 | 3});
  kernels::and_(out.data(), a.data(), b.data(), 5);
  CHECK(out == Vec{1, 2, 3, 2, 0});
}
