#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;

using namespace mpcache;

TEST_CASE("a tensor holds its shape's product of elements, row-major") {
  RealTensor t = RealTensor::zeros({2, 3, 4});
  CHECK(t.size() == 24);
  CHECK(t.dimension() == 3);
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(std::all_of(t.begin(), t.end(), [](double v) { return v == 0.0; }));
  t(1, 2, 3) = 7.0;
  t(0, 1, 0) = 5.0;
  CHECK(t.data()[1 * 12 + 2 * 4 + 3] == 7.0);
  CHECK(t.data()[4] == 5.0);
  CHECK(t.end() - t.begin() == 24);

  const RingTensor filled = RingTensor::filled({3}, 9);
  CHECK(filled == RingTensor{9, 9, 9});
  CHECK(RingTensor::from_shape({5, 0}).size() == 0);
  // As xtensor's default: zero dimensions, one element.
  const RealTensor scalar;
  CHECK(scalar.dimension() == 0);
  CHECK(scalar.size() == 1);
  CHECK(scalar() == 0.0);
}

TEST_CASE("indices follow xtensor's rule for their count") {
  const RealTensor m = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};
  CHECK(m.shape() == Shape{2, 3});
  CHECK(m(1, 2) == 6.0);
  CHECK(m(1) == 2.0);        // too few: the missing leading axes at 0
  CHECK(m(7, 1, 0) == 4.0);  // too many: the extra leading ones dropped
}

TEST_CASE("copies are deep, moves take the buffer, equality needs the shape too") {
  RingTensor a = {1, 2, 3, 4};
  RingTensor b = a;
  b(0) = 10;
  CHECK(a(0) == 1);
  CHECK(b != a);
  const Ring* buffer = b.data();
  RingTensor c = std::move(b);
  CHECK(c.data() == buffer);
  a = c;
  CHECK(a == c);
  CHECK(a.data() != c.data());
  // The same elements in another shape are another tensor.
  RingTensor square = RingTensor::from_shape({2, 2});
  std::copy(c.begin(), c.end(), square.begin());
  CHECK(square != c);
  CHECK(square.size() == c.size());
}

TEST_CASE("transpose swaps a matrix's axes and refuses other ranks") {
  const RealTensor m = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};
  const RealTensor t = transpose(m);
  CHECK(t == RealTensor{{1.0, 4.0}, {2.0, 5.0}, {3.0, 6.0}});
  CHECK(transpose(t) == m);
  CHECK_THROWS_WITH_AS(transpose(RealTensor{1.0, 2.0}), doctest::Contains("transpose needs a matrix, not 1 dimensions"),
                       Error);
}

TEST_CASE("nested lists must have rows of one length") {
  CHECK_THROWS_WITH_AS((RealTensor{{1.0, 2.0}, {3.0}}), doctest::Contains("Tensor: rows of different lengths (1 and 2)"),
                       Error);
}

TEST_CASE("adopt_bytes takes a message's buffer as the tensor's, without a copy") {
  const RingTensor values = {{1, 2, 3}, {~Ring{0}, Ring{1} << 63, 42}};
  std::vector<std::byte> bytes(values.size() * sizeof(Ring));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  const std::byte* buffer = bytes.data();
  RingTensor adopted = RingTensor::adopt_bytes({2, 3}, std::move(bytes));
  CHECK(reinterpret_cast<const std::byte*>(adopted.data()) == buffer);  // no copy
  CHECK(adopted == values);
  // It stays a tensor like any other: moves keep the buffer, copies are deep
  // and writable, and it can be written in place.
  RingTensor moved = std::move(adopted);
  CHECK(reinterpret_cast<const std::byte*>(moved.data()) == buffer);
  RingTensor copy = moved;
  CHECK(copy == values);
  CHECK(copy.data() != moved.data());
  moved(1, 2) = 7;
  CHECK(moved(1, 2) == 7);
  CHECK(copy(1, 2) == 42);
  copy = moved;  // same size: copied into copy's own buffer
  CHECK(copy == moved);
  CHECK(copy.data() != moved.data());
  // An empty message is an empty tensor.
  CHECK(RingTensor::adopt_bytes({0, 4}, {}).size() == 0);
}

TEST_CASE("adopt_bytes refuses a byte count that is not the shape's") {
  CHECK_THROWS_WITH_AS(RingTensor::adopt_bytes({2, 3}, std::vector<std::byte>(47)),
                       doctest::Contains("Tensor::adopt_bytes: 47 bytes for 6 elements of 8 bytes"), Error);
}

TEST_CASE("reshape keeps the buffer and refuses another element count") {
  RingTensor t = {1, 2, 3, 4, 5, 6};
  const Ring* buffer = t.data();
  t.reshape({3, 2});
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.data() == buffer);
  CHECK(t(2, 1) == 6);
  CHECK_THROWS_WITH_AS(t.reshape({4, 2}), doctest::Contains("Tensor::reshape: 6 elements into 8"), Error);
  CHECK(t.shape() == Shape{3, 2});
}
