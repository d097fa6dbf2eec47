#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::share_of;
using mpcache::testing::run_both;

TEST_CASE("one-hot of secret indices over C classes, C a power of two or not") {
  for (std::size_t classes : {1u, 2u, 5u, 64u}) {
    RingTensor idx = RingTensor::from_shape({16});
    for (std::size_t i = 0; i < 16; ++i) idx(i) = (i * 11 + 3) % classes;
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
      auto a = co_await share_of(p, 0, idx);
      co_return co_await p.reveal(co_await ops::one_hot(p, a, classes));
    });
    const RingTensor& r = secure.results[1];
    REQUIRE(shape_of(r) == Shape{16, classes});
    for (std::size_t i = 0; i < 16; ++i)
      for (std::size_t c = 0; c < classes; ++c) CHECK(r(i, c) == (idx(i) == c ? 1u : 0u));
    CHECK(clear == r);
  }
}

TEST_CASE("one-hot over 64 classes costs what log2(64) bits need") {
  const std::size_t k = 16;
  RingTensor idx = RingTensor::from_shape({k});
  for (std::size_t i = 0; i < k; ++i) idx(i) = (i * 5) % 64;
  const auto cost = mpcache::testing::measure_op(idx, [](Rss3& p, const Rss3Share& a) {
    return ops::one_hot(p, a, 64);
  });
  // A2B of 6 bits: 2 + 3 rounds, 7 words per index; AND tree over 6 bits: 3
  // rounds of 64 literals per index, packed 8 to a word (8 words); B2A: 2
  // rounds of 64 words per index.
  testing::check_pinned("ops.one_hot_64.rounds", cost.rounds);
  for (auto bytes : cost.bytes) CHECK(bytes == k * (7 + 3 * 8 + 64) * 8);
}
