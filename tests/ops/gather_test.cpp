#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"

using namespace mpcache;
using mpcache::testing::share_of;
using mpcache::testing::run_both;

TEST_CASE("token-wise and cluster-wise gathers pick the secret rows") {
  FixedPoint fp;
  const std::size_t tokens = 32, d = 4, clusters = 8, per_cluster = tokens / clusters;
  const RingTensor cache = fp.encode(mpcache::testing::random_real({tokens, d}, -5, 5, 95));
  RingTensor token_idx = RingTensor::from_shape({3}), cluster_idx = RingTensor::from_shape({2});
  token_idx(0) = 31;
  token_idx(1) = 0;
  token_idx(2) = 17;
  cluster_idx(0) = 6;
  cluster_idx(1) = 2;
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto kv = co_await share_of(p, 1, cache);
    auto ti = co_await share_of(p, 0, token_idx);
    auto ci = co_await share_of(p, 0, cluster_idx);
    auto tokens_picked =
        co_await ops::token_gather(p, co_await ops::one_hot(p, ti, tokens), kv);
    auto clustered = ops::reshape<P>(kv, {clusters, per_cluster, d});
    auto clusters_picked =
        co_await ops::cluster_gather(p, co_await ops::one_hot(p, ci, clusters), clustered);
    co_return std::array<RingTensor, 2>{co_await p.reveal(tokens_picked),
                                        co_await p.reveal(clusters_picked)};
  });
  const auto& [tok, clu] = secure.results[0];
  REQUIRE(shape_of(tok) == Shape{3, d});
  REQUIRE(shape_of(clu) == Shape{2 * per_cluster, d});
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t j = 0; j < d; ++j) CHECK(tok(r, j) == cache(token_idx(r), j));
  for (std::size_t c = 0; c < 2; ++c)
    for (std::size_t t = 0; t < per_cluster; ++t)
      for (std::size_t j = 0; j < d; ++j)
        CHECK(clu(c * per_cluster + t, j) == cache(cluster_idx(c) * per_cluster + t, j));
  CHECK(clear == secure.results[0]);
}
