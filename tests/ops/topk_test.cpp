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

namespace {
// Reference: indices ordered by value descending, then index ascending.
std::vector<std::size_t> reference_order(const xt::xarray<double>& x, std::size_t row) {
  const std::size_t n = x.shape()[1];
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return x(row, a) > x(row, b); });
  return order;
}

void check_topk(ops::TopKMethod method, std::size_t n, std::size_t k) {
  FixedPoint fp;
  xt::xarray<double> xr = mpcache::testing::random_real({3, n}, -100, 100, 300 + n);
  for (std::size_t j = 0; j < n; j += 3) xr(1, j) = 7.25;  // many ties in row 1
  const RingTensor x = fp.encode(xr);
  auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
    auto a = co_await share_of(p, 0, x);
    auto r = co_await ops::topk(p, a, k, method);
    co_return std::array<RingTensor, 2>{co_await p.reveal(r.values), co_await p.reveal(r.indices)};
  });
  const auto& [values, indices] = secure.results[0];
  REQUIRE(shape_of(values) == Shape{3, k});
  for (std::size_t row = 0; row < 3; ++row) {
    const auto order = reference_order(xr, row);
    for (std::size_t r = 0; r < k; ++r) {
      CHECK(indices(row, r) == order[r]);
      CHECK(values(row, r) == x(row, order[r]));
    }
  }
  CHECK(clear == secure.results[0]);
}
}  // namespace

TEST_CASE("top-k by sorting network: ordered, ties by index, any n") {
  for (auto [n, k] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 1}, {8, 3}, {13, 13}, {16, 4}})
    check_topk(ops::TopKMethod::network, n, k);
}

TEST_CASE("top-k by ranks: ordered, ties by index, any n") {
  for (auto [n, k] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 2}, {8, 3}, {13, 5}, {16, 16}})
    check_topk(ops::TopKMethod::rank, n, k);
}

TEST_CASE("rank-based top-k takes constant rounds; the network takes 10 per layer") {
  const RingTensor x = ring_shift_floor(mpcache::testing::random_ring({1, 16}, 92), 30);
  const auto rank_measured = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) {
    return ops::topk_rank(p, a, 4);
  });
  const auto net_measured = mpcache::testing::measure_op(x, [](Rss3& p, const Rss3Share& a) {
    return ops::topk_network(p, a, 4);
  });
  const auto rank = ops::topk_rank_cost(16, 4), net = ops::topk_network_cost(16);
  CHECK(rank_measured.rounds == rank.rounds);
  CHECK(net_measured.rounds == net.rounds);
  CHECK(net.rounds == 10 * 10);
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(rank_measured.bytes[id] == rank.bytes_per_party);
    CHECK(net_measured.bytes[id] == net.bytes_per_party);
  }
}

TEST_CASE("the cost model picks ranks for small n on a LAN and the network for large n") {
  const ops::LinkModel lan;
  CHECK(ops::topk_rank_cost(64, 16).seconds(lan) < ops::topk_network_cost(64).seconds(lan));
  CHECK(ops::topk_network_cost(4096).seconds(lan) < ops::topk_rank_cost(4096, 1024).seconds(lan));
}

TEST_CASE("top-1 one-hot of long rows by the tournament: exact, ties by index, the tournament's rounds") {
  FixedPoint fp;
  for (std::size_t n : {65u, 124u, 300u}) {
    CAPTURE(n);
    xt::xarray<double> xr = mpcache::testing::random_real({3, n}, -100, 100, 600 + n);
    for (std::size_t j = 0; j < n; ++j) xr(1, j) = 7.25;  // all tied in row 1: index 0 wins
    xr(2, n - 1) = 150;                                    // the last element, across every level's padding
    const RingTensor x = fp.encode(xr);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<RingTensor> {
      auto a = co_await share_of(p, 0, x);
      co_return co_await p.reveal(co_await ops::topk_onehot(p, a, 1));
    });
    const RingTensor& hot = secure.results[0];
    REQUIRE(shape_of(hot) == Shape{3, 1, n});
    for (std::size_t row = 0; row < 3; ++row) {
      const std::size_t best = reference_order(xr, row)[0];
      for (std::size_t j = 0; j < n; ++j) CHECK(hot(row, 0, j) == (j == best ? 1u : 0u));
    }
    CHECK(clear == hot);
  }
  // Rounds: the tournament's levels (the running one-hot's products hide
  // behind the next level's comparisons; the last level's bits select it).
  const RingTensor row = mpcache::testing::random_ring({2, 124}, 97);
  const auto plan = ops::tournament_plan(2, 124);
  REQUIRE(plan.size() >= 2);
  std::size_t want = 0;
  for (std::size_t m : plan) want += ops::tournament_level_rounds(m);
  const auto measured = mpcache::testing::measure_op(ring_shift_floor(row, 20), [](Rss3& p, const Rss3Share& a) {
    return ops::topk_onehot(p, a, 1);
  });
  CHECK(measured.rounds == want);
}
