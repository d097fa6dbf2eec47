#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
#include "../support/parties.hpp"
#include "../support/add2_parties.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::share_of;
using mpcache::testing::run_both;

namespace {
// Reference: indices ordered by value descending, then index ascending.
std::vector<std::size_t> reference_order(const RealTensor& x, std::size_t row) {
  const std::size_t n = x.shape()[1];
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // std::sort with the tie-break spelled out: libstdc++-12's stable_sort uses
  // get_temporary_buffer, which clang-19 flags as deprecated.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return x(row, a) != x(row, b) ? x(row, a) > x(row, b) : a < b;
  });
  return order;
}

void check_topk(ops::TopKMethod method, std::size_t n, std::size_t k) {
  FixedPoint fp;
  RealTensor xr = mpcache::testing::random_real({3, n}, -100, 100, 300 + n);
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

TEST_CASE("top-k by blocks (stops at k): ordered, ties by index, any n") {
  for (auto [n, k] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 1}, {8, 3}, {13, 5}, {16, 4}, {33, 4}, {64, 9}})
    check_topk(ops::TopKMethod::blocks, n, k);
}

TEST_CASE("top-k with a bound on the values: same result on fewer bits") {
  FixedPoint fp;
  const std::size_t n = 40, k = 7;
  RealTensor xr = mpcache::testing::random_real({2, n}, -100, 100, 77);
  xr(0, 5) = xr(0, 9) = 99.5;  // a tie at the top
  xr(1, 3) = 127.99;           // the edges of the range
  xr(1, 4) = -127.99;
  xr(1, 30) = 127.98;
  const RingTensor x = fp.encode(xr);
  // |x| < 128 = 2^7: |x| < 2^(7 + 18) as ring integers, width 7 + 18 + 2.
  const int width = ops::comparison_width(fp.frac_bits(), 7);
  CHECK(width == 27);
  for (auto method : {ops::TopKMethod::network, ops::TopKMethod::blocks, ops::TopKMethod::rank}) {
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
      auto a = co_await share_of(p, 1, x);
      auto r = co_await ops::topk(p, a, k, method, {}, width);
      co_return std::array<RingTensor, 2>{co_await p.reveal(r.values), co_await p.reveal(r.indices)};
    });
    const auto& [values, indices] = secure.results[0];
    for (std::size_t row = 0; row < 2; ++row) {
      const auto order = reference_order(xr, row);
      for (std::size_t r = 0; r < k; ++r) {
        CHECK(indices(row, r) == order[r]);
        CHECK(values(row, r) == x(row, order[r]));
      }
    }
    CHECK(clear == secure.results[0]);
    const auto wide = ops::topk_sort_cost<Rss3Costs>(n, k, method == ops::TopKMethod::rank ? ops::TopKMethod::network : method, ring_bits, 2);
    const auto narrow = ops::topk_sort_cost<Rss3Costs>(n, k, method == ops::TopKMethod::rank ? ops::TopKMethod::network : method, width, 2);
    CHECK(narrow.max_bytes() < wide.max_bytes());
    CHECK(narrow.rounds < wide.rounds);
  }
}

TEST_CASE("top-k costs: every method as its model says; the network 8 rounds per layer") {
  const RingTensor x = ring_shift_floor(mpcache::testing::random_ring({1, 16}, 92), 30);
  auto measure = [&](ops::TopKMethod method) {
    return mpcache::testing::measure_op(x, [method](Rss3& p, const Rss3Share& a) {
      return ops::topk(p, a, 4, method);
    });
  };
  const auto rank = ops::topk_rank_cost<Rss3Costs>(16, 4), net = ops::topk_network_cost<Rss3Costs>(16, 4), blocks = ops::topk_blocks_cost<Rss3Costs>(16, 4);
  std::map<ops::TopKMethod, std::uint64_t> rounds;
  for (auto [method, model] : {std::pair{ops::TopKMethod::rank, rank}, std::pair{ops::TopKMethod::network, net},
                               std::pair{ops::TopKMethod::blocks, blocks}}) {
    const auto measured = measure(method);
    CHECK(measured.bytes == model.bytes);
    CHECK(measured.rounds <= model.rounds);
    rounds[method] = measured.rounds;
  }
  // The model: 10 layers of msb_bits (6 rounds at 64 bits) + bit_times
  // (2); then the keys' split: A2B of 4 bits (4 rounds), B2A (2),
  // truncation (1). Measured, each layer after the first overlaps the one
  // before by a round (its comparison's leads start at once): 7 a layer.
  CHECK(net.rounds == 10 * 8 + 7);
  CHECK(rounds[ops::TopKMethod::network] == 8 + 9 * 7 + 6);
  // Blocks of 4: 3 layers sorting them, then 2 merges of 1 + 2 layers.
  CHECK(blocks.rounds == 9 * 8 + 7);
  testing::check_pinned("ops.topk.blocks.measured_rounds", rounds[ops::TopKMethod::blocks]);
  CHECK(blocks.max_bytes() < net.max_bytes());
  // Ranks: comparisons (msb_bits 6 + B2A 2), one-hot of the ranks (A2B of 4
  // bits 4, AND 2, B2A 2), the product 1; measured one less (B2A overlaps).
  testing::check_pinned("ops.topk.rank.rounds", std::vector<std::uint64_t>{rank.rounds, rounds[ops::TopKMethod::rank]});
}

// The same algorithms planned on add2's own costs (Add2Costs): its
// networks' online bytes are what the model says; rounds at most the model's.
TEST_CASE("top-k on add2 costs what Add2Costs says") {
  const RingTensor x = ring_shift_floor(mpcache::testing::random_ring({2, 16}, 93), 30);
  for (auto method : {ops::TopKMethod::network, ops::TopKMethod::blocks, ops::TopKMethod::rank}) {
    INFO("method " << static_cast<int>(method));
    const auto measured = mpcache::testing::measure_add2({x}, [method](Add2& p, auto& s) {
      return ops::topk(p, s[0], 4, method);
    });
    const OpCost model = method == ops::TopKMethod::rank ? ops::topk_rank_cost<Add2Costs>(16, 4, ring_bits, 2)
                                                         : ops::topk_sort_cost<Add2Costs>(16, 4, method, ring_bits, 2);
    CHECK(measured.rounds <= model.rounds);
    if (method == ops::TopKMethod::rank) {  // the product's second operand is an input: opened at sharing
      CHECK(measured.bytes[0] <= model.bytes[0]);
    } else {
      CHECK(measured.bytes[0] == model.bytes[0]);
      CHECK(measured.bytes[1] == model.bytes[1]);
    }
  }
  // A layer of the network: on add2 msb_bits (7 rounds at 64 bits) and
  // bit_dot (1), on rss3 6 + 2; the keys' split: add2 A2B of 10 bits (5),
  // B2A (1), a local truncation, rss3 6 + 2 + 1. add2's comparisons send
  // more bytes.
  CHECK(ops::topk_network_cost<Add2Costs>(1024, 256).rounds == ops::topk_network_cost<Rss3Costs>(1024, 256).rounds - 3);
  CHECK(ops::topk_network_cost<Add2Costs>(1024, 256).max_bytes() > ops::topk_network_cost<Rss3Costs>(1024, 256).max_bytes());
}

TEST_CASE("the cost model picks ranks for small n on a LAN and the network for large n") {
  const Link lan = lan_link();
  CHECK(ops::topk_rank_cost<Rss3Costs>(64, 16).seconds(lan) < ops::topk_network_cost<Rss3Costs>(64, 16).seconds(lan));
  CHECK(ops::topk_network_cost<Rss3Costs>(4096, 4096).seconds(lan) < ops::topk_rank_cost<Rss3Costs>(4096, 4096).seconds(lan));
  // Ranks hold n^2 words a row: never above topk_rank_max_n, although at
  // 1,024 their modelled time would win since their signs' B2A is narrow.
  CHECK(ops::topk_rank_cost<Rss3Costs>(1024, 256).seconds(lan) < ops::topk_blocks_cost<Rss3Costs>(1024, 256).seconds(lan));
  CHECK(ops::resolve_topk_method<Rss3Costs>(ops::TopKMethod::automatic, 512, 128, lan) == ops::TopKMethod::rank);
  // A quarter of 1024: the blocks stop at k.
  CHECK(ops::resolve_topk_method<Rss3Costs>(ops::TopKMethod::automatic, 1024, 256, lan) == ops::TopKMethod::blocks);
  CHECK(ops::resolve_topk_method<Rss3Costs>(ops::TopKMethod::automatic, 1024, 1024, lan) == ops::TopKMethod::network);
}

TEST_CASE("top-1 one-hot of long rows by the tournament: exact, ties by index, the tournament's rounds") {
  FixedPoint fp;
  for (std::size_t n : {65u, 124u, 300u}) {
    CAPTURE(n);
    RealTensor xr = mpcache::testing::random_real({3, n}, -100, 100, 600 + n);
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
  const auto plan = ops::tournament_plan<Rss3Costs>(2, 124);
  REQUIRE(plan.size() >= 2);
  std::size_t want = 0;
  for (std::size_t m : plan) want += ops::tournament_level_rounds<Rss3Costs>(m);
  const auto measured = mpcache::testing::measure_op(ring_shift_floor(row, 20), [](Rss3& p, const Rss3Share& a) {
    return ops::topk_onehot(p, a, 1);
  });
  CHECK(measured.rounds == want);
}
