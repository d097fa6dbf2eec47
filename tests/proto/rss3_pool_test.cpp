// rss3 with a caller's ComputePool: every party holds the same bits, and
// sends the same bytes in the same rounds, as without one.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"

using namespace mpcache;

TEST_CASE("rss3 with a compute pool: the same shares, bytes and rounds as without") {
  // A decode-shaped product and a prefill-shaped one, with the pairwise
  // keys from one seed: every party must hold the same bits either way.
  const RingTensor x = ring_sample({1, 768}, 1), w = ring_sample({768, 1536}, 2);
  const RingTensor xs = ring_sample({130, 96}, 3), ws = ring_sample({96, 200}, 4);
  auto job = [&](Rss3& p) -> Task<std::vector<RingTensor>> {
    auto a = co_await testing::share_of(p, 0, x);
    auto b = co_await testing::share_of(p, 1, w);
    auto c = co_await testing::share_of(p, 0, xs);
    auto d = co_await testing::share_of(p, 1, ws);
    auto ab = co_await p.matmul_trunc(a, b);
    auto cd = co_await p.matmul(c, d);
    auto sum = p.add(ab, ab);
    co_return std::vector<RingTensor>{ab.own, ab.next, cd.own, cd.next, sum.own, co_await p.reveal(cd)};
  };
  const auto plain = testing::run_rss3(job, Rss3Options{.exact_truncation = true, .insecure_seed = 9});
  CHECK(plain.results[0][5] == ring_matmul(xs, ws));  // the product is right at all
  for (std::size_t threads = 1; threads <= 4; ++threads) {
    ComputePool pool(threads);  // one pool for the three parties: they share this thread
    const auto pooled =
        testing::run_rss3(job, Rss3Options{.exact_truncation = true, .insecure_seed = 9, .pool = &pool});
    for (std::size_t id = 0; id < 3; ++id) {
      CHECK_MESSAGE(pooled.results[id] == plain.results[id], "party " << id << ", " << threads << " threads");
      CHECK(pooled.costs[id].payload_bytes_sent() == plain.costs[id].payload_bytes_sent());
      CHECK(pooled.costs[id].rounds == plain.costs[id].rounds);
    }
  }
}
