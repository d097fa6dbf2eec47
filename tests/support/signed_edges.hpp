// Test support: the edge values of a w-bit signed comparison, then random
// ones in range. Include after the `import` lines and parties.hpp.
#pragma once

namespace mpcache::testing {

// 0, +-1, +-2, the largest and smallest w-bit values and their neighbours,
// then 150 random w-bit values (159 in all: not a multiple of 64 or 8).
inline RingTensor signed_edges(int width, std::uint64_t seed) {
  const std::int64_t top =
      width == 64 ? std::numeric_limits<std::int64_t>::max() : (std::int64_t{1} << (width - 1)) - 1;
  std::vector<std::int64_t> v{0, 1, -1, top, -top - 1, top - 1, -top, std::min<std::int64_t>(2, top), -2};
  RingTensor x = RingTensor::from_shape({v.size()});
  for (std::size_t i = 0; i < v.size(); ++i) x.data()[i] = static_cast<Ring>(v[i]);
  RingTensor r = random_ring({150}, seed);
  for (auto& e : r) e = static_cast<Ring>(static_cast<std::int64_t>(e) >> (64 - width));
  return ring_concat_last(x, r);
}

}  // namespace mpcache::testing
