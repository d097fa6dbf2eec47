#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;
using mpcache::testing::random_ring;

TEST_CASE("ring add, sub, neg and mul wrap modulo 2^64") {
  for (const Shape& shape : {Shape{1}, Shape{17}, Shape{3, 5}, Shape{2, 3, 4}}) {
    RingTensor a = random_ring(shape, 1), b = random_ring(shape, 2);
    RingTensor s = ring_add(a, b), d = ring_sub(a, b), n = ring_neg(a), m = ring_mul(a, b);
    CHECK(shape_of(s) == shape);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const Ring x = a.data()[i], y = b.data()[i];
      CHECK(s.data()[i] == Ring(x + y));
      CHECK(d.data()[i] == Ring(x - y));
      CHECK(n.data()[i] == Ring(0 - x));
      CHECK(m.data()[i] == Ring(x * y));
    }
    RingTensor acc = a;
    ring_add_inplace(acc, b);
    ring_sub_inplace(acc, b);
    CHECK(acc == a);
  }
}

TEST_CASE("ring matmul equals the naive triple loop") {
  for (auto [m, k, n] : {std::array<std::size_t, 3>{1, 1, 1}, {1, 64, 17}, {5, 3, 7}, {8, 8, 8}}) {
    RingTensor a = random_ring({m, k}, 3), b = random_ring({k, n}, 4);
    RingTensor c = ring_matmul(a, b);
    REQUIRE(shape_of(c) == Shape{m, n});
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        Ring want = 0;
        for (std::size_t p = 0; p < k; ++p) want += a(i, p) * b(p, j);
        CHECK(c(i, j) == want);
      }
  }
}

TEST_CASE("shifts are floor and ceil of the signed value") {
  const std::int64_t values[] = {0, 1, -1, 5, -5, 262143, -262144, 262145, -262145,
                                 std::numeric_limits<std::int64_t>::max(),
                                 std::numeric_limits<std::int64_t>::min()};
  RingTensor t = RingTensor::from_shape({std::size(values)});
  for (std::size_t i = 0; i < std::size(values); ++i) t(i) = static_cast<Ring>(values[i]);
  for (int bits : {0, 1, 18, 63}) {
    RingTensor f = ring_shift_floor(t, bits), c = ring_shift_ceil(t, bits);
    for (std::size_t i = 0; i < std::size(values); ++i) {
      const long double exact = std::ldexp(static_cast<long double>(values[i]), -bits);
      CHECK(static_cast<long double>(static_cast<std::int64_t>(f(i))) == std::floor(exact));
      CHECK(static_cast<long double>(static_cast<std::int64_t>(c(i))) == std::ceil(exact));
    }
  }
  CHECK_THROWS_AS(ring_shift_floor(t, 64), Error);
  CHECK_THROWS_AS(ring_shift_ceil(t, -1), Error);
}

TEST_CASE("shape mismatches are clear errors naming both shapes") {
  RingTensor a = ring_zeros({2, 3}), b = ring_zeros({3, 2});
  try {
    (void)ring_add(a, b);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("(2,3) vs (3,2)") != std::string::npos);
  }
  CHECK_THROWS_AS(ring_matmul(a, a), Error);
  CHECK_THROWS_AS(ring_matmul(ring_zeros({6}), b), Error);
  RingTensor acc = ring_zeros({2, 2});
  CHECK_THROWS_AS(ring_matmul_accumulate(acc, a, ring_zeros({3, 3})), Error);
}

TEST_CASE("tensors round-trip through bytes; a wrong byte count is refused") {
  RingTensor a = random_ring({4, 5}, 9);
  auto bytes = ring_bytes(a);
  CHECK(bytes.size() == 160);
  CHECK(ring_from_bytes(bytes, {4, 5}) == a);
  RingTensor flat = ring_from_bytes(bytes, {20});
  CHECK(std::equal(flat.begin(), flat.end(), a.begin()));
  CHECK_THROWS_AS(ring_from_bytes(bytes.first(159), {4, 5}), Error);
  CHECK_THROWS_AS(ring_from_bytes(bytes, {4, 6}), Error);
}

TEST_CASE("ring_sample is deterministic per seed and spreads over the ring") {
  RingTensor a = ring_sample({1000}, 5), b = ring_sample({1000}, 5), c = ring_sample({1000}, 6);
  CHECK(a == b);
  CHECK(a != c);
  std::size_t high = 0;
  for (auto v : a) high += v >> 63;
  CHECK(high > 400);
  CHECK(high < 600);
}
