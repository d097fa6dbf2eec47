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

TEST_CASE("matmul_sum adds the terms' products, asking for each term in turn") {
  const std::size_t k = 3, m = 5;
  const std::array<std::size_t, 3> widths{4, 1, 6};  // the terms' inner dimensions
  std::vector<RingTensor> as, bs;
  RingTensor expect = ring_zeros({k, m});
  for (std::size_t i = 0; i < widths.size(); ++i) {
    as.push_back(mpcache::testing::random_ring({k, widths[i]}, 300 + i));
    bs.push_back(mpcache::testing::random_ring({widths[i], m}, 310 + i));
    ring_add_inplace(expect, ring_matmul(as[i], bs[i]));
  }
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
    std::vector<std::pair<typename P::Share, typename P::Share>> terms;
    for (std::size_t i = 0; i < widths.size(); ++i)
      terms.emplace_back(co_await share_of(p, 0, as[i]), co_await share_of(p, 1, bs[i]));
    std::vector<std::size_t> asked;
    auto sum = co_await ops::matmul_sum(p, terms.size(), [&](std::size_t i) {
      asked.push_back(i);
      return terms[i];
    });
    CHECK(asked == std::vector<std::size_t>{0, 1, 2});
    co_return co_await p.reveal(sum);
  });
  CHECK(clear == expect);
  for (const auto& r : secure.results) CHECK(r == expect);
}

TEST_CASE("matmul_sum costs: one round and the bytes of one product on rss3") {
  // Terms (2, 3) x (3, 4) twice: the local products are summed before the
  // one reshare, so every party sends 2 x 4 words once, as one matmul does.
  const RingTensor x = mpcache::testing::random_ring({2, 3}, 41), y = mpcache::testing::random_ring({3, 4}, 42);
  auto summed = mpcache::testing::measure_op(x, [&](Rss3& p, const Rss3Share& a) -> Task<Rss3Share> {
    // y as a public constant's sharing (local): zeros shaped (3, 4), plus y.
    const Rss3Share y_share = p.add_public(Rss3::apply(a, [](const RingTensor&) { return ring_zeros({3, 4}); }), y);
    co_return co_await ops::matmul_sum(p, 2, [&](std::size_t) { return std::pair{a, y_share}; });
  });
  CHECK(summed.rounds == 1);
  CHECK(summed.bytes == std::array<std::uint64_t, 3>{2 * 4 * 8, 2 * 4 * 8, 2 * 4 * 8});
}
