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

TEST_CASE("a message given up becomes a tensor without a copy; a wrong byte count is refused") {
  const RingTensor a = random_ring({4, 5}, 9);
  const auto view = ring_bytes(a);
  std::vector<std::byte> bytes(view.begin(), view.end());
  const std::byte* buffer = bytes.data();
  const RingTensor t = ring_from_bytes(std::move(bytes), {4, 5});
  CHECK(reinterpret_cast<const std::byte*>(t.data()) == buffer);
  CHECK(t == a);
  CHECK_THROWS_WITH_AS(ring_from_bytes(std::vector<std::byte>(view.begin(), view.end()), {4, 6}),
                       doctest::Contains("expected 192 bytes for a tensor of shape (4,6), got 160"), Error);
}

TEST_CASE("reshaping a tensor no longer needed moves it; a named one is copied") {
  RingTensor a = random_ring({4, 6}, 3);
  const RingTensor expected = a;
  const RingTensor copied = ring_reshape(a, {6, 4});
  CHECK(copied.data() != a.data());
  CHECK(std::equal(copied.begin(), copied.end(), expected.begin()));
  const Ring* buffer = a.data();
  const RingTensor moved = ring_reshape(std::move(a), {2, 12});
  CHECK(moved.data() == buffer);
  CHECK(moved.shape() == Shape{2, 12});
  CHECK(std::equal(moved.begin(), moved.end(), expected.begin()));
  CHECK_THROWS_WITH_AS(ring_reshape(RingTensor(expected), {5, 5}),
                       doctest::Contains("reshape (4,6) to (5,5): element counts differ"), Error);
}

TEST_CASE("a product over row and column blocks read in place equals the product of their copies") {
  // (70 x 12) x (12 x 7), the inner axis in blocks [0, 4), [4, 10), [10, 12)
  // (70 rows: the kernels' packed path, as in the prefill).
  const RingTensor a0 = random_ring({70, 12}, 1), a1 = random_ring({70, 12}, 2);
  const RingTensor b0 = random_ring({12, 7}, 3), b1 = random_ring({12, 7}, 4);
  RingTensor whole = ring_zeros({70, 7});
  ring_matmul_rss3_accumulate(whole, a0, a1, b0, b1);
  RingTensor blocked = ring_zeros({70, 7});
  for (auto [begin, end] : {std::pair<std::size_t, std::size_t>{0, 4}, {4, 10}, {10, 12}}) {
    const RingMatrixView columns = ring_matrix_columns(a0, begin, end), rows = ring_matrix_rows(b1, begin, end);
    CHECK(columns.data == a0.data() + begin);  // in place: no copy
    CHECK(columns.stride == 12);
    CHECK(rows.data == b1.data() + begin * 7);
    RingTensor part = ring_zeros({70, 7});
    ring_matmul_rss3_accumulate(part, columns, ring_matrix_columns(a1, begin, end), ring_matrix_rows(b0, begin, end),
                                rows);
    // The same block copied out: a's columns sliced, b's rows as the
    // columns of its transpose.
    RingTensor reference = ring_zeros({70, 7});
    const RingTensor b0_rows = transpose(ring_slice_last(transpose(b0), begin, end));
    const RingTensor b1_rows = transpose(ring_slice_last(transpose(b1), begin, end));
    ring_matmul_rss3_accumulate(reference, ring_slice_last(a0, begin, end), ring_slice_last(a1, begin, end), b0_rows,
                                b1_rows);
    CHECK(part == reference);
    ring_matmul_rss3_accumulate(blocked, columns, ring_matrix_columns(a1, begin, end), ring_matrix_rows(b0, begin, end),
                                rows);
  }
  CHECK(blocked == whole);
  CHECK(ring_matrix(a0).data == a0.data());
}

TEST_CASE("matrix views refuse other ranks, ranges outside the matrix and mismatched products") {
  const RingTensor m = random_ring({3, 4}, 5);
  CHECK_THROWS_WITH_AS(ring_matrix(random_ring({2, 3, 4}, 6)), doctest::Contains("ring_matrix: needs a matrix, not shape (2,3,4)"),
                       Error);
  CHECK_THROWS_WITH_AS(ring_matrix_rows(m, 2, 4), doctest::Contains("ring_matrix_rows: rows [2, 4) outside 3"), Error);
  CHECK_THROWS_WITH_AS(ring_matrix_columns(m, 3, 2), doctest::Contains("ring_matrix_columns: columns [3, 2) outside 4"),
                       Error);
  RingTensor acc = ring_zeros({3, 3});
  CHECK_THROWS_WITH_AS(
      ring_matmul_rss3_accumulate(acc, ring_matrix(m), ring_matrix(m), ring_matrix_rows(m, 0, 3), ring_matrix_rows(m, 0, 3)),
      doctest::Contains("ring_matmul_rss3: expected (m,k) x (k,n) in both components, got (3,4), (3,4) x (3,4), (3,4)"),
      Error);
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
