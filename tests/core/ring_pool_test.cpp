// The ring's products and element-wise operations give the same bits with
// and without a ComputePool, for 1 to 4 threads, on shapes that split by
// rows, by column blocks, with uneven and empty parts, and below the
// threshold (no split). The reference is the scalar loop or a plain loop.
// (tests/proto/rss3_pool_test.cpp: the same for rss3's shares.)
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;

using namespace mpcache;

namespace {

struct Dims {
  std::size_t m, k, n;
};

std::string describe(Dims d, std::size_t threads) {
  return std::to_string(d.m) + "x" + std::to_string(d.k) + "x" + std::to_string(d.n) + " on " +
         std::to_string(threads) + " threads";
}

// Split by column blocks (few rows: decode), by rows (64 rows or more per
// part: prefill), with parts that get no columns, and too small to split.
const Dims shapes[] = {{1, 768, 3072}, {1, 769, 1001}, {3, 517, 1013}, {130, 300, 33},
                       {257, 129, 67}, {600, 70, 50},  {5, 7, 9},      {1, 1, 1}};

std::vector<std::unique_ptr<ComputePool>> pools_of_1_to_4_threads() {
  std::vector<std::unique_ptr<ComputePool>> pools;
  for (std::size_t t = 1; t <= 4; ++t) pools.push_back(std::make_unique<ComputePool>(t));
  return pools;
}

}  // namespace

TEST_CASE("ring matmul: bit-identical with and without a compute pool") {
  const auto pools = pools_of_1_to_4_threads();
  std::uint64_t seed = 1;
  for (const Dims d : shapes) {
    const RingTensor a = ring_sample({d.m, d.k}, seed++), b = ring_sample({d.k, d.n}, seed++);
    const RingTensor start = ring_sample({d.m, d.n}, seed++);  // accumulate onto non-zero values
    RingTensor expected = start;
    ring_matmul_accumulate_reference(expected, a, b);
    for (const auto& pool : pools) {
      RingTensor got = start;
      ring_matmul_accumulate(got, a, b, pool.get());
      CHECK_MESSAGE(got == expected, describe(d, pool->threads()));
      CHECK_MESSAGE(ring_matmul(a, b, pool.get()) == ring_matmul(a, b), describe(d, pool->threads()));
    }
  }
}

TEST_CASE("ring rss3 matmul: bit-identical with and without a compute pool") {
  const auto pools = pools_of_1_to_4_threads();
  std::uint64_t seed = 100;
  for (const Dims d : shapes) {
    const RingTensor a0 = ring_sample({d.m, d.k}, seed++), a1 = ring_sample({d.m, d.k}, seed++);
    const RingTensor b0 = ring_sample({d.k, d.n}, seed++), b1 = ring_sample({d.k, d.n}, seed++);
    const RingTensor start = ring_sample({d.m, d.n}, seed++);
    // a0 (b0 + b1) + a1 b0 by the scalar reference loop.
    RingTensor expected = start;
    ring_matmul_accumulate_reference(expected, a0, ring_add(b0, b1));
    ring_matmul_accumulate_reference(expected, a1, b0);
    RingTensor unpooled = start;
    ring_matmul_rss3_accumulate(unpooled, a0, a1, b0, b1);
    CHECK_MESSAGE(unpooled == expected, describe(d, 0));
    for (const auto& pool : pools) {
      RingTensor got = start;
      ring_matmul_rss3_accumulate(got, a0, a1, b0, b1, pool.get());
      CHECK_MESSAGE(got == expected, describe(d, pool->threads()));
    }
  }
}

TEST_CASE("ring element-wise operations: bit-identical with and without a compute pool") {
  const auto pools = pools_of_1_to_4_threads();
  // Three and four parts of 64 Ki elements, uneven tails, and below the grain.
  for (std::size_t n : {(std::size_t{3} << 16) + 5, (std::size_t{1} << 18) + 3, std::size_t{1001}, std::size_t{0}}) {
    const RingTensor a = ring_sample({n}, n + 1), b = ring_sample({n}, n + 2);
    RingTensor sum = RingTensor::from_shape({n}), diff = sum, prod = sum, x = sum, both = sum;
    for (std::size_t i = 0; i < n; ++i) {
      const Ring p = a.data()[i], q = b.data()[i];
      sum.data()[i] = p + q;
      diff.data()[i] = p - q;
      prod.data()[i] = p * q;
      x.data()[i] = p ^ q;
      both.data()[i] = p & q;
    }
    for (const auto& pool : pools) {
      ComputePool* p = pool.get();
      INFO(n << " elements on " << p->threads() << " threads");
      CHECK(ring_add(a, b, p) == sum);
      CHECK(ring_sub(a, b, p) == diff);
      CHECK(ring_mul(a, b, p) == prod);
      CHECK(ring_xor(a, b, p) == x);
      CHECK(ring_and(a, b, p) == both);
      RingTensor acc = a;
      ring_add_inplace(acc, b, p);
      CHECK(acc == sum);
      acc = a;
      ring_sub_inplace(acc, b, p);
      CHECK(acc == diff);
      acc = a;
      ring_xor_inplace(acc, b, p);
      CHECK(acc == x);
    }
  }
}
