#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../../bench/page_estimators.hpp"

using namespace mpcache;

namespace {
using testing::run;

RealTensor uniform(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
  RingTensor bits = ring_sample(shape, seed);
  RealTensor out = RealTensor::from_shape(shape);
  auto b = bits.begin();
  for (auto& v : out) v = lo + (hi - lo) * (static_cast<double>(*b++ >> 11) * 0x1p-53);
  return out;
}

// A hand-made single-layer, single-KV-head cache and query group.
struct Scene {
  std::size_t t, d, g;
  RealTensor keys, values, queries;
};

Scene scene(std::size_t t, std::size_t d, std::size_t g, std::uint64_t seed) {
  return {t, d, g, uniform({t, d}, seed), uniform({t, d}, seed + 1), uniform({g, d}, seed + 2)};
}

template <class P>
typename P::Share secret(P& p, const RealTensor& x) {
  if constexpr (ExactReals<P>) return p.from_real(x);
  else return typename P::Share{FixedPoint(p.frac_bits()).encode(x)};
}

template <class P>
std::vector<long> revealed_positions(P& p, const typename P::Share& s) {
  RingTensor r = run(p.reveal(s));
  std::vector<long> out;
  for (Ring v : r) out.push_back(static_cast<long>(static_cast<std::int64_t>(v)));
  return out;
}

// Rows [first, last) of a (n, d) array.
RealTensor row_block(const RealTensor& x, std::size_t first, std::size_t last) {
  const std::size_t d = x.shape()[1];
  RealTensor out = RealTensor::from_shape({last - first, d});
  std::copy(x.data() + first * d, x.data() + last * d, out.data());
  return out;
}

std::vector<long> sorted(std::vector<long> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<long> range(long a, long b) {
  std::vector<long> v;
  for (long i = a; i < b; ++i) v.push_back(i);
  return v;
}

// Runs one decode-step selection (and optionally a prefill view first).
template <class P, class Pol>
std::vector<long> select_once(P& p, Pol& policy, const Scene& s, std::optional<RealTensor> probs = {},
                              std::size_t layer = 0, std::size_t layers = 1) {
  std::vector<kv::HeadCache<P>> cache{{secret(p, s.keys), secret(p, s.values)}};
  std::vector<typename P::Share> queries{secret(p, s.queries)};
  policy.reset(layers, 1);
  if (probs) {
    std::vector<typename P::Share> pr{secret(p, *probs)};
    kv::PrefillView<P> pre{layer, s.t - 1, s.g, &pr, nullptr};
    std::vector<kv::HeadCache<P>> prompt{{ops::rows<P>(cache[0].keys, 0, s.t - 1), ops::rows<P>(cache[0].values, 0, s.t - 1)}};
    pre.cache = &prompt;
    run(policy.after_prefill(p, pre));
  }
  kv::StepView<P> step{layer, s.t - 1, s.g, &queries, &cache};
  auto sel = run(kv::materialize(p, run(policy.select(p, step))));  // picked clusters as rows
  REQUIRE(sel.keys.size() == 1);
  const auto pos = revealed_positions(p, sel.positions[0]);
  // The gathered keys are the cache rows at those positions.
  const auto k = run(p.reveal(sel.keys[0]));
  const FixedPoint fp(p.frac_bits());
  for (std::size_t i = 0; i < pos.size(); ++i) {
    const double got = ExactReals<P> ? static_cast<double>(static_cast<std::int64_t>(k(i, 0))) / std::ldexp(1.0, p.frac_bits())
                                     : fp.decode(k(i, 0));
    CHECK(got == doctest::Approx(s.keys(static_cast<std::size_t>(pos[i]), 0)).epsilon(1e-4));
  }
  return pos;
}

// Causal prefill attention (g*T', T') putting `mass` on the given columns.
RealTensor attention_on(std::size_t g, std::size_t t, const std::vector<std::size_t>& hot) {
  RealTensor a = RealTensor::zeros({g * t, t});
  for (std::size_t h = 0; h < g; ++h)
    for (std::size_t r = 0; r < t; ++r) {
      std::vector<std::size_t> cols;
      for (auto c : hot) if (c <= r) cols.push_back(c);
      if (cols.empty()) cols.push_back(r);
      for (auto c : cols) a(h * t + r, c) = 1.0 / double(cols.size());
    }
  return a;
}

// Brute-force MPCache dynamic selection (no static eviction), float64.
std::vector<long> mpcache_reference(const Scene& s, std::size_t budget, const kv::MpCacheOptions& o) {
  const std::size_t sz = o.cluster, a = s.t, f = (a - 1) / sz, k = (budget - 2 * sz) / sz, d = s.d;
  std::vector<double> q(d, 0.0), q_plus(d, 0.0), q_minus(d, 0.0);
  for (std::size_t h = 0; h < s.g; ++h)
    for (std::size_t i = 0; i < d; ++i) {
      q[i] += s.queries(h, i);
      (s.queries(h, i) < 0 ? q_minus : q_plus)[i] += s.queries(h, i);
    }
  auto summary = [&](std::size_t first, std::size_t count) {
    double sim = 0;
    for (std::size_t i = 0; i < d; ++i) {
      double mx = -1e300, mn = 1e300;
      for (std::size_t r = first; r < first + count; ++r) mx = std::max(mx, s.keys(r, i)), mn = std::min(mn, s.keys(r, i));
      if (o.similarity == kv::Similarity::bound) {
        // Quest's bound, summed over the group's heads.
        sim += q_plus[i] * mx + q_minus[i] * mn;
      } else {
        sim += q[i] * (o.alpha * mx + (1 - o.alpha) * mn);
      }
    }
    return sim;
  };
  auto top = [](const std::vector<std::pair<double, long>>& v, std::size_t n) {
    // Stable by position in v (std::sort, not stable_sort: see topk_test.cpp).
    std::vector<std::size_t> pos(v.size());
    std::iota(pos.begin(), pos.end(), std::size_t{0});
    std::sort(pos.begin(), pos.end(), [&](std::size_t a, std::size_t b) {
      return v[a].first != v[b].first ? v[a].first > v[b].first : a < b;
    });
    std::vector<long> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(v[pos[i]].second);
    return out;
  };
  const std::size_t c = f / 2;
  std::vector<std::pair<double, long>> coarse;
  for (std::size_t i = 1; i < c; ++i) coarse.push_back({summary(2 * i * sz, 2 * sz), long(i)});
  const std::size_t kc = std::min(c - 1, std::max<std::size_t>((k + 1) / 2, std::size_t(std::ceil(o.coarse_ratio * double(c - 1)))));
  auto kept_coarse = top(coarse, kc);
  std::vector<long> cand;
  for (long x : kept_coarse) cand.push_back(2 * x);
  for (long x : kept_coarse) cand.push_back(2 * x + 1);
  cand.push_back(1);
  if (f % 2 == 1) cand.push_back(long(f - 1));
  std::vector<std::pair<double, long>> fine;
  for (long x : cand) fine.push_back({summary(std::size_t(x) * sz, sz), x});
  auto ids = top(fine, k);
  std::vector<long> pos = range(0, long(sz));
  for (long x : ids)
    for (long r = 0; r < long(sz); ++r) pos.push_back(x * long(sz) + r);
  for (long r = long(f * sz); r < long(a); ++r) pos.push_back(r);
  return pos;
}
}  // namespace

TEST_SUITE("kv policies") {
  TEST_CASE("full cache and StreamingLLM select by position") {
    Ref p;
    const Scene s = scene(20, 4, 2, 1);
    kv::FullCache<Ref> full;
    CHECK(select_once(p, full, s) == range(0, 20));
    kv::StreamingLlm<Ref> streaming(8, 4);
    auto expect = range(0, 4);
    for (long i = 16; i < 20; ++i) expect.push_back(i);
    CHECK(select_once(p, streaming, s) == expect);
  }

  TEST_CASE("H2O keeps the heavy hitters of the prefill and the recent window") {
    Ref p;
    const Scene s = scene(30, 4, 2, 3);
    kv::H2O<Ref> h2o(8, 0.5);
    auto pos = select_once(p, h2o, s, attention_on(2, 29, {2, 7, 11, 13}));
    CHECK(sorted(pos) == std::vector<long>{2, 7, 11, 13, 26, 27, 28, 29});
  }

  TEST_CASE("TOVA keeps what the last prompt query attends to") {
    Ref p;
    const Scene s = scene(30, 4, 1, 5);
    kv::Tova<Ref> tova(5);
    auto pos = select_once(p, tova, s, attention_on(1, 29, {1, 4, 9, 20}));
    CHECK(sorted(pos) == std::vector<long>{1, 4, 9, 20, 29});
  }

  TEST_CASE("SnapKV picks the observation window's votes, max-pooled") {
    Ref p;
    const Scene s = scene(60, 4, 1, 7);
    kv::SnapKv<Ref> snap(12, 4, 3);  // window 4, prefix 8 tokens, pooling 3 wide
    auto pos = select_once(p, snap, s, attention_on(1, 59, {10, 30}));
    // votes at 10 and 30, pooled to 9..11 and 29..31; the remaining picks
    // are ties at zero, broken by index (0, 1); then the recent window.
    CHECK(sorted(pos) == std::vector<long>{0, 1, 9, 10, 11, 29, 30, 31, 56, 57, 58, 59});
  }

  TEST_CASE("LongCache picks the keys most aligned with the query") {
    Ref p;
    Scene s = scene(40, 4, 1, 9);
    s.queries = RealTensor{{1.0, 0.0, 0.0, 0.0}};
    for (std::size_t r = 0; r < 40; ++r) s.keys(r, 0) = -std::abs(s.keys(r, 0));  // nothing aligned...
    s.keys(17, 0) = 5.0;  // ...but 17 and 23
    s.keys(23, 0) = 0.5;
    kv::LongCache<Ref> lc(10, 4, 4);
    auto pos = sorted(select_once(p, lc, s));
    CHECK(std::find(pos.begin(), pos.end(), 17) != pos.end());
    CHECK(std::find(pos.begin(), pos.end(), 23) != pos.end());
    CHECK(pos.size() == 10);
  }

  TEST_CASE("InfLLM picks the block whose representative keys match the query") {
    Ref p;
    Scene s = scene(100, 4, 1, 13);
    s.queries = RealTensor{{0.0, 1.0, 0.0, 0.0}};
    for (std::size_t r = 0; r < 100; ++r) s.keys(r, 1) = -std::abs(s.keys(r, 1));
    s.keys(25, 1) = 4.0;  // block 1 = positions 20..35 (sinks 0..3, blocks of 16)
    kv::InfLlm<Ref> inf(64);  // sinks 4 + local 16 + loose <= 15 + one block
    auto pos = sorted(select_once(p, inf, s, attention_on(1, 99, {25})));
    auto expect = range(0, 4);
    for (long i = 20; i < 36; ++i) expect.push_back(i);
    for (long i = 84; i < 100; ++i) expect.push_back(i);
    CHECK(pos == expect);
  }

  TEST_CASE("Quest picks the page whose bound is highest") {
    Ref p;
    Scene s = scene(80, 4, 1, 11);
    s.queries = RealTensor{{0.0, 0.0, 1.0, 0.0}};
    s.keys(37, 2) = 9.0;  // page 2 (32..47)
    kv::Quest<Ref> quest(32, 16);  // one page + the tail
    auto pos = sorted(select_once(p, quest, s));
    auto expect = range(32, 48);
    for (long i = 64; i < 80; ++i) expect.push_back(i);
    CHECK(pos == expect);
  }

  TEST_CASE("ArkVale attends the sink page, the pages the float64 estimators rank highest, and the tail") {
    // Float64 estimates from bench/page_estimators.hpp, summed over the
    // group's query heads; ranks over pages [1, 8), page 0 is the sink.
    const std::pair<kv::PageEstimate, bench::PageEstimator> estimators[] = {
        {kv::PageEstimate::cuboid_mean, bench::PageEstimator::cuboid_mean},
        {kv::PageEstimate::cuboid_max, bench::PageEstimator::cuboid_max},
        {kv::PageEstimate::centroid, bench::PageEstimator::centroid}};
    for (const auto& [estimate, reference] : estimators)
      for (std::uint64_t seed : {41u, 42u, 43u}) {
        CAPTURE(kv::page_estimate_name(estimate));
        CAPTURE(seed);
        const Scene s = scene(16 * 8 + 5, 8, 2, seed);
        const RealTensor keys = s.keys;
        const bench::KeyRows rows{keys.data(), s.t, s.d};
        std::vector<double> score(8, 0.0);
        for (std::size_t page = 1; page < 8; ++page) {
          const auto digest = bench::digest_page(rows, page * 16, (page + 1) * 16);
          for (std::size_t h = 0; h < s.g; ++h) {
            std::vector<double> q(s.d);
            for (std::size_t i = 0; i < s.d; ++i) q[i] = s.queries(h, i);
            score[page] += bench::estimate_importance(reference, q.data(), digest);
          }
        }
        score[0] = -1e300;  // the sink is attended anyway
        auto expect = range(0, 16);
        for (auto page : bench::top_pages(score, 2)) {
          const auto run_of = range(long(page) * 16, long(page + 1) * 16);
          expect.insert(expect.end(), run_of.begin(), run_of.end());
        }
        for (long i = 128; i < long(s.t); ++i) expect.push_back(i);
        std::sort(expect.begin(), expect.end());
        const kv::ArkValeOptions o{.page = 16, .sink_pages = 1, .estimate = estimate};
        Ref r;
        kv::ArkVale<Ref> ar(64, o);  // sink + tail + 2 pages
        CHECK(sorted(select_once(r, ar, s)) == expect);
        Plain p;
        kv::ArkVale<Plain> ap(64, o);
        CHECK(sorted(select_once(p, ap, s)) == expect);
      }
  }

  TEST_CASE("ArkVale's backing tier selects what the resident one does, holding only digests, sinks and the tail") {
    // Plain (exact ring arithmetic): chunks of 3 pages in the file, 2 in
    // memory, so the streamed gathers add their terms differently. The
    // file-tier policy sees the cache as the decoder leaves it for a policy
    // that keeps its own: the prompt, then each step's row alone.
    const std::size_t d = 8, g = 2, prompt = 16 * 9 + 3, steps = 20, page = 16;
    const Scene s = scene(prompt + steps, d, g, 77);
    Plain p;
    kv::ArkValeOptions resident_options{.page = page, .sink_pages = 1};
    kv::ArkValeOptions file_options = resident_options;
    file_options.tier = kv::PageTier::file;
    file_options.chunk_pages = 3;
    kv::ArkVale<Plain> resident(64, resident_options), backed(64, file_options);
    CHECK_FALSE(resident.owns_cache());
    CHECK(backed.owns_cache());
    CHECK(backed.name() == "arkvale-recall");
    const auto keys = secret(p, s.keys), values = secret(p, s.values);
    std::vector<kv::HeadCache<Plain>> whole{{ops::rows<Plain>(keys, 0, prompt), ops::rows<Plain>(values, 0, prompt)}};
    resident.reset(1, 1);
    backed.reset(1, 1);
    run(resident.after_prefill(p, kv::PrefillView<Plain>{0, prompt, g, nullptr, &whole}));
    run(backed.after_prefill(p, kv::PrefillView<Plain>{0, prompt, g, nullptr, &whole}));
    CHECK(backed.backing_bytes() > 0);  // the prompt's pages are stored with the prefill
    for (std::size_t step = 0; step < steps; ++step) {
      CAPTURE(step);
      const std::size_t t = prompt + step + 1;
      std::vector<kv::HeadCache<Plain>> all{{ops::rows<Plain>(keys, 0, t), ops::rows<Plain>(values, 0, t)}};
      std::vector<kv::HeadCache<Plain>> newest{{ops::rows<Plain>(keys, t - 1, t), ops::rows<Plain>(values, t - 1, t), t - 1}};
      std::vector<Plain::Share> queries{secret(p, uniform({g, d}, 500 + step))};
      auto a = run(resident.select(p, kv::StepView<Plain>{0, t - 1, g, &queries, &all}));
      auto b = run(backed.select(p, kv::StepView<Plain>{0, t - 1, g, &queries, &newest}));
      CHECK(revealed_positions(p, b.positions[0]) == revealed_positions(p, a.positions[0]));
      CHECK(run(p.reveal(b.keys[0])) == run(p.reveal(a.keys[0])));
      CHECK(run(p.reveal(b.values[0])) == run(p.reveal(a.values[0])));
      CHECK(revealed_positions(p, a.positions[0]).size() == page + 2 * page + (t - (t - 1) / page * page));  // sink, 2 pages, tail
    }
    // Stored: every complete page but the sink, a row of 16 (2d + 1) words each.
    const std::size_t t = prompt + steps, f = (t - 1) / page, row = page * (2 * d + 1) * sizeof(Ring);
    CHECK(backed.backing_bytes() == (f - 1) * row);
    CHECK(resident.backing_bytes() == 0);
    // Resident: the digests and boxes (4d words a page), the sink page, the
    // tail and one page (the store's layout), against every token.
    CHECK(backed.resident_bytes() <= f * 4 * d * sizeof(Ring) + 3 * row);
    CHECK(resident.resident_bytes() >= t * (2 * d + 1) * sizeof(Ring));
  }

  TEST_CASE("a page store's file tier gives back what it was given, and names a folder it cannot use") {
    Ref r;
    kv::PageStore<Ref> memory({.tier = kv::PageTier::memory, .chunk_pages = 4});
    kv::PageStore<Ref> file({.tier = kv::PageTier::file, .chunk_pages = 4});
    // Multiples of 2^-10 below 2^10: exact through ref's fixed-point layout
    // transforms (the memory tier's), so every tier must give them back.
    RealTensor pages = uniform({11, 6}, 91, -1024, 1024);
    for (auto& v : pages) v = std::round(v * 1024.0) / 1024.0;
    for (auto [first, last] : {std::pair<std::size_t, std::size_t>{0, 3}, {3, 9}, {9, 11}}) {
      const auto part = secret(r, row_block(pages, first, last));
      memory.append(part);
      file.append(part);
    }
    REQUIRE(file.chunks() == 3);
    CHECK(file.file_bytes() == 11 * 6 * sizeof(double));
    kv::PageStore<Ref> copy = file;  // a copy has its own file
    copy.append(secret(r, row_block(pages, 0, 1)));
    CHECK(copy.pages() == 12);
    CHECK(file.pages() == 11);
    for (std::size_t c = 0; c < 3; ++c) {
      CAPTURE(c);
      const auto [first, last] = file.chunk_pages(c);
      const RealTensor expect = row_block(pages, first, last);
      CHECK(r.to_real(file.load(c)) == expect);  // bit for bit
      CHECK(r.to_real(memory.load(c)) == expect);
      if (c < 2) CHECK(r.to_real(copy.load(c)) == expect);
    }
    RealTensor copy_tail = RealTensor::from_shape({4, 6});  // pages 8-10, then page 0 again
    std::copy(pages.data() + 8 * 6, pages.data() + 11 * 6, copy_tail.data());
    std::copy(pages.data(), pages.data() + 6, copy_tail.data() + 3 * 6);
    CHECK(r.to_real(copy.load(2)) == copy_tail);
    CHECK_THROWS_WITH_AS(file.append(secret(r, uniform({1, 5}, 1))), doctest::Contains("for rows of width 6"), Error);
    CHECK_THROWS_WITH_AS(file.load(3), doctest::Contains("chunk 3 of 3"), Error);
    kv::PageStore<Ref> nowhere({.tier = kv::PageTier::file, .dir = "/nonexistent/mpcache-pages"});
    CHECK_THROWS_WITH_AS(nowhere.append(secret(r, uniform({1, 6}, 2))), doctest::Contains("/nonexistent/mpcache-pages"),
                         Error);
  }

  TEST_CASE("ArkVale refuses a budget without room for its sinks, tail and one page") {
    CHECK_THROWS_WITH_AS(kv::ArkVale<Ref>(47, {.page = 16, .sink_pages = 1}),
                         doctest::Contains("budget 47 is below 1 sink page(s), the tail and one page of 16 tokens"),
                         Error);
    CHECK(kv::ArkVale<Ref>(48, {.page = 16, .sink_pages = 1}).top_pages() == 1);
  }

  TEST_CASE("MPCache hierarchical selection equals the brute-force reference, on ref and plain") {
    auto o = kv::MpCacheOptions::paper();
    o.keep_ratio = 1.0;
    o.flat_up_to = 0;  // the paper's two levels, as the reference
    for (auto similarity : {kv::Similarity::linear, kv::Similarity::bound})
    for (std::uint64_t seed : {21u, 22u, 23u, 24u})
    for (std::size_t t : {16u * 13 + 5, 16u * 13}) {  // the second fills a cluster with the current token
      CAPTURE(seed);
      CAPTURE(t);
      CAPTURE(similarity == kv::Similarity::bound);
      o.similarity = similarity;
      const Scene s = scene(t, 8, 2, seed);
      const std::size_t budget = 16 * 6;
      const auto expect = mpcache_reference(s, budget, o);
      Ref r;
      kv::MpCache<Ref> mr(budget, o);
      const auto got_ref = select_once(r, mr, s, attention_on(2, s.t - 1, {0}));
      CHECK(got_ref == expect);
      Plain p;
      kv::MpCache<Plain> mp(budget, o);
      CHECK(select_once(p, mp, s, attention_on(2, s.t - 1, {0})) == expect);
    }
  }

  TEST_CASE("MPCache's bound similarity finds one sharp key that the linear mix averages away") {
    // Cluster 2 (32..47) holds the one key that matches the query (9 on the
    // query's dimension) next to a very negative one; cluster 4 (64..79) is
    // uniformly mild (1.5). Linear: 0.6*9 + 0.4*(-12) = 0.6 < 1.5, so it picks
    // cluster 4; the bound scores cluster 2 by its best key, 9.
    Scene s = scene(16 * 6 + 1, 4, 1, 31);
    s.queries = RealTensor{{0.0, 0.0, 1.0, 0.0}};
    s.keys(37, 2) = 9.0;
    s.keys(40, 2) = -12.0;
    for (std::size_t r = 64; r < 80; ++r) s.keys(r, 2) = 1.5;
    auto picked = [&](kv::Similarity similarity) {
      auto o = kv::MpCacheOptions::paper();
      o.keep_ratio = 1.0;
      o.hierarchical = false;
      o.similarity = similarity;
      Ref p;
      kv::MpCache<Ref> mc(48, o);  // first cluster + one picked + the tail
      return sorted(select_once(p, mc, s, attention_on(1, s.t - 1, {0})));
    };
    auto expect = [](long first) {
      auto v = range(0, 16);
      for (long i = first; i < first + 16; ++i) v.push_back(i);
      v.push_back(96);
      return v;
    };
    CHECK(picked(kv::Similarity::linear) == expect(64));
    CHECK(picked(kv::Similarity::bound) == expect(32));
  }

  TEST_CASE("MPCache static eviction keeps as many tokens on ref as on the ring when scores differ by less than a code") {
    // 48 tokens clearly kept (0..47), then two whose scores differ by far
    // less than one fixed-point code: token 101 by 40e-12 more than token 100
    // (a tie on the ring). Both are kept, at 49 and 50 of 50. Ref once kept
    // only one of the two: its sort keys ordered the sub-code difference by
    // index, so the 49th token counted as below the 50th, and its slot held
    // a zero row at position 0.
    const Scene s = scene(200, 4, 1, 37);
    RealTensor probs = RealTensor::zeros({199, 199});
    for (std::size_t r = 0; r < 199; ++r) {
      for (std::size_t c = 0; c < 48; ++c) probs(r, c) = 0x1p-6;
      if (r >= 101) probs(r, 100) = 0x1p-8, probs(r, 101) = 0x1p-8 + 1e-12;
    }
    auto o = kv::MpCacheOptions::paper();
    o.keep_ratio = 0.25;  // keep 50 of 199 prompt tokens
    Ref r;
    Plain q;
    kv::MpCache<Ref> on_ref(48, o);
    kv::MpCache<Plain> on_plain(48, o);
    const auto got = sorted(select_once(r, on_ref, s, probs));
    CHECK(got == sorted(select_once(q, on_plain, s, probs)));
    // The first cluster (0..15), one picked of 16..31 and 32..47, and the
    // tail: both near-tied tokens and the new one.
    REQUIRE(got.size() == 35);
    CHECK(std::adjacent_find(got.begin(), got.end()) == got.end());  // no position twice
    CHECK(std::vector<long>(got.end() - 3, got.end()) == std::vector<long>{100, 101, 199});
    for (std::size_t i = 0; i + 3 < got.size(); ++i) CHECK(got[i] < 48);
  }

  TEST_CASE("MPCache static eviction keeps the attended tokens; odd layers reuse the indices") {
    Ref p;
    const Scene s = scene(200, 4, 1, 31);
    auto o = kv::MpCacheOptions::paper();
    o.keep_ratio = 0.25;  // keep 50 of 199 prompt tokens
    kv::MpCache<Ref> mc(48, o);
    std::vector<std::size_t> hot;
    for (std::size_t i = 0; i < 199; i += 4) hot.push_back(i);  // 50 tokens
    const auto probs = attention_on(1, 199, hot);
    // Layer 3 shares layer 2's eviction: run both through one policy.
    std::vector<kv::HeadCache<Ref>> cache{{p.from_real(s.keys), p.from_real(s.values)}};
    std::vector<kv::HeadCache<Ref>> prompt{{ops::rows<Ref>(cache[0].keys, 0, 199), ops::rows<Ref>(cache[0].values, 0, 199)}};
    std::vector<Ref::Share> pr{p.from_real(probs)}, queries{p.from_real(s.queries)};
    mc.reset(4, 1);
    for (std::size_t l = 2; l < 4; ++l) {
      std::vector<Ref::Share> layer_probs = l == 2 ? pr : std::vector<Ref::Share>{p.from_real(RealTensor::zeros({199, 199}))};
      kv::PrefillView<Ref> pre{l, 199, 1, &layer_probs, &prompt};
      run(mc.after_prefill(p, pre));
    }
    std::vector<long> got[2];
    for (std::size_t l = 2; l < 4; ++l) {
      kv::StepView<Ref> step{l, 199, 1, &queries, &cache};
      auto sel = run(kv::materialize(p, run(mc.select(p, step))));
      got[l - 2] = sorted(revealed_positions(p, sel.positions[0]));
    }
    CHECK(got[0] == got[1]);  // index sharing
    REQUIRE(got[0].size() <= 48);
    for (long x : got[0]) CHECK((x % 4 == 0 || x == 199));  // only kept tokens and the new one
    CHECK(got[0].front() == 0);                                // first cluster always kept
    CHECK(got[0].back() == 199);                               // the newest token always kept
  }
}
