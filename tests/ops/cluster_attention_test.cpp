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

// A query group (g, d) over a token list of `length` rows in clusters of
// s: the first cluster, clusters `picked` (in this order) and the tail
// [f s, length) are attended.
struct Scene {
  std::size_t g = 2, d = 8, s = 4, f = 9, length = 39;
  std::vector<std::size_t> picked{6, 2, 7};
  RealTensor queries, keys, values;
  Scene() {
    queries = mpcache::testing::random_real({g, d}, -1.5, 1.5, 501);
    keys = mpcache::testing::random_real({length, d}, -1.5, 1.5, 502);
    values = mpcache::testing::random_real({length, d}, -4, 4, 503);
  }
  RingTensor hot() const {
    RingTensor h = ring_zeros({picked.size(), f});
    for (std::size_t i = 0; i < picked.size(); ++i) h(i, picked[i]) = 1;
    return h;
  }
  // Attended rows in cluster_attention's weight order.
  std::vector<std::size_t> rows() const {
    std::vector<std::size_t> r;
    for (std::size_t t = 0; t < s; ++t) r.push_back(t);
    for (std::size_t c : picked)
      for (std::size_t t = 0; t < s; ++t) r.push_back(c * s + t);
    for (std::size_t t = f * s; t < length; ++t) r.push_back(t);
    return r;
  }
};

}  // namespace

TEST_CASE("cluster_attention: softmax over the first, picked and newest rows, against float64") {
  const Scene sc;
  const auto rows = sc.rows();
  const std::size_t n = rows.size();
  REQUIRE(n == ops::attended_count(ops::ClusterSpan{sc.s, sc.s}, sc.picked.size(), sc.f, sc.length));
  FixedPoint fp;
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    auto [secure, clear] = run_both([&]<class P>(P& p) -> Task<std::array<RingTensor, 2>> {
      auto q = co_await share_of(p, 0, fp.encode(sc.queries));
      auto k = co_await share_of(p, 1, fp.encode(sc.keys));
      auto v = co_await share_of(p, 1, fp.encode(sc.values));
      auto hot = co_await share_of(p, 0, sc.hot());
      auto [out, probs] = co_await ops::cluster_attention(p, q, k, v, hot, ops::ClusterSpan{sc.s, sc.s});
      co_return std::array<RingTensor, 2>{co_await p.reveal(out), co_await p.reveal(probs)};
    }, Rss3Options{.exact_truncation = exact});
    const RealTensor out = fp.decode(secure.results[0][0]), probs = fp.decode(secure.results[0][1]);
    REQUIRE(out.shape() == Shape{sc.g, sc.d});
    REQUIRE(probs.shape() == Shape{sc.g, n});
    // The bounds of softmax_times over as many entries (nonlinear_test).
    const double out_bound = exact ? 5e-4 : 1e-2;
    for (std::size_t h = 0; h < sc.g; ++h) {
      std::vector<double> score(n);
      double mx = -1e300, sum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        score[i] = 0;
        for (std::size_t j = 0; j < sc.d; ++j) score[i] += sc.queries(h, j) * sc.keys(rows[i], j);
        mx = std::max(mx, score[i]);
      }
      for (double x : score) sum += std::exp(x - mx);
      std::vector<double> want_out(sc.d, 0.0);
      for (std::size_t i = 0; i < n; ++i) {
        const double want = std::exp(score[i] - mx) / sum;
        CHECK(std::fabs(probs(h, i) - want) <= 4e-3);
        for (std::size_t j = 0; j < sc.d; ++j) want_out[j] += want * sc.values(rows[i], j);
      }
      for (std::size_t j = 0; j < sc.d; ++j) CHECK(std::fabs(out(h, j) - want_out[j]) <= out_bound);
    }
    const RealTensor c = fp.decode(clear[0]);
    for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::fabs(c.data()[i] - out.data()[i]) <= 1e-2);
  }
}

TEST_CASE("cluster_attention rejects a one-hot wider than the list and a first span off the clusters") {
  FixedPoint fp;
  auto errors = mpcache::testing::run_plain([&](Plain& p) -> Task<std::vector<std::string>> {
    auto q = co_await share_of(p, 0, fp.encode(mpcache::testing::random_real({1, 4}, -1, 1, 1)));
    auto kv = co_await share_of(p, 0, fp.encode(mpcache::testing::random_real({10, 4}, -1, 1, 2)));
    std::vector<std::string> out;
    for (auto [clusters, first] : {std::pair<std::size_t, std::size_t>{3, 4}, std::pair<std::size_t, std::size_t>{2, 3}}) {
      auto hot = co_await share_of(p, 0, ring_zeros({1, clusters}));
      try {
        (void)co_await ops::cluster_attention(p, q, kv, kv, hot, ops::ClusterSpan{4, first});
        out.push_back("");
      } catch (const Error& e) {
        out.push_back(e.what());
      }
    }
    co_return out;
  });
  CHECK(errors[0].find("3 clusters of 4 rows, first 4, over keys (10,4)") != std::string::npos);
  CHECK(errors[1].find("2 clusters of 4 rows, first 3") != std::string::npos);
}

// What it saves: gathering the picked clusters moves k s (2d + 1) elements
// per KV head; attending them in place moves the clustered rows' raw
// scores and the scattered weights (g f s each) instead. Exact counts
// under rss3; the truncated products (the attended scores, the output)
// are the same elements either way but for the g (k + 1) s scores of the
// first and picked clusters, which replace g (k + 1) s of the gathered
// version's.
TEST_CASE("cluster_attention's costs against gathering the clusters, then softmax_times") {
  const Scene sc;
  FixedPoint fp;
  const RingTensor qe = fp.encode(sc.queries), ke = fp.encode(sc.keys), ve = fp.encode(sc.values), hot = sc.hot();
  for (bool exact : {false, true}) {
    CAPTURE(exact);
    const Rss3Options options{.exact_truncation = exact, .insecure_seed = 1};
    auto in_place = mpcache::testing::measure_op(qe, [&](Rss3& p, const Rss3Share& q) -> Task<Rss3Share> {
      const auto pub = [&](const RingTensor& t) {
        return p.add_public(Rss3::apply(q, [&](const RingTensor&) { return ring_zeros(shape_of(t)); }), t);
      };
      auto [out, probs] = co_await ops::cluster_attention(p, q, pub(ke), pub(ve), pub(hot), ops::ClusterSpan{sc.s, sc.s});
      co_return out;
    }, options);
    auto gathered = mpcache::testing::measure_op(qe, [&](Rss3& p, const Rss3Share& q) -> Task<Rss3Share> {
      const auto pub = [&](const RingTensor& t) {
        return p.add_public(Rss3::apply(q, [&](const RingTensor&) { return ring_zeros(shape_of(t)); }), t);
      };
      const std::size_t s = sc.s, d = sc.d;
      auto table = ops::reshape<Rss3>(ops::concat_last<Rss3>(ops::rows<Rss3>(pub(ke), 0, sc.f * s),
                                                             ops::rows<Rss3>(pub(ve), 0, sc.f * s)),
                                      {sc.f, s, 2 * d});
      auto picked = co_await ops::cluster_gather(p, pub(hot), table);  // (k s, 2d)
      auto keys = ops::stack_rows<Rss3>(ops::stack_rows<Rss3>(ops::rows<Rss3>(pub(ke), 0, s), ops::slice_last<Rss3>(picked, 0, d)),
                                        ops::rows<Rss3>(pub(ke), sc.f * s, sc.length));
      auto values = ops::stack_rows<Rss3>(ops::stack_rows<Rss3>(ops::rows<Rss3>(pub(ve), 0, s), ops::slice_last<Rss3>(picked, d, 2 * d)),
                                          ops::rows<Rss3>(pub(ve), sc.f * s, sc.length));
      auto scores = co_await p.matmul_trunc(q, ops::transpose<Rss3>(keys));
      auto [out, probs] = co_await ops::softmax_times(p, scores, values);
      co_return out;
    }, options);
    MESSAGE("in place: " << in_place.rounds << " rounds, " << in_place.bytes[0] << "/" << in_place.bytes[1] << "/"
                         << in_place.bytes[2] << " bytes; gathered: " << gathered.rounds << " rounds, "
                         << gathered.bytes[0] << "/" << gathered.bytes[1] << "/" << gathered.bytes[2] << " bytes");
    // Under exact truncation no round more: the raw scores' product and the
    // one-hot's truncating product take the rounds of the gathered keys'
    // truncating product, and the scatter runs beside the softmax's
    // reciprocal. Under probabilistic truncation the scatter follows the
    // softmax: one round more.
    CHECK(in_place.rounds == gathered.rounds + (exact ? 0 : 1));
    // Plain products: 2 g f s words (raw scores, scattered weights) against
    // the gather's k s 2d: here 144 against 192, 8 bytes each.
    const std::int64_t words = std::int64_t(2 * sc.g * sc.f * sc.s) - std::int64_t(sc.picked.size() * sc.s * 2 * sc.d);
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(std::int64_t(in_place.bytes[i]) - std::int64_t(gathered.bytes[i]) == 8 * words);
    }
  }
}
