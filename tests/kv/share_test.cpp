// MPCache's layer index sharing variants (MpCacheOptions::share_pairs,
// share_widen, share_rerank) select exactly as their definitions say: a
// brute-force float64 pick per layer of a four-layer step, against the
// policy on ref and plain.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"

using namespace mpcache;

namespace {
using testing::run;

constexpr std::size_t layers = 4, cluster = 4, d = 4, g = 2;

RealTensor uniform(const Shape& shape, std::uint64_t seed) {
  RingTensor bits = ring_sample(shape, seed);
  RealTensor out = RealTensor::from_shape(shape);
  auto b = bits.begin();
  for (auto& v : out) v = -1 + 2 * (static_cast<double>(*b++ >> 11) * 0x1p-53);
  return out;
}

template <class P>
typename P::Share secret(P& p, const RealTensor& x) {
  if constexpr (ExactReals<P>) return p.from_real(x);
  else return typename P::Share{FixedPoint(p.frac_bits()).encode(x)};
}

// One KV head per layer: its keys (t, d) and its query group (g, d).
struct Layer {
  RealTensor keys, queries;
};

std::vector<Layer> scene(std::size_t t, std::uint64_t seed) {
  std::vector<Layer> out;
  for (std::size_t l = 0; l < layers; ++l) out.push_back({uniform({t, d}, seed + 2 * l), uniform({g, d}, seed + 2 * l + 1)});
  return out;
}

// The bound similarity of fine cluster c: sum over the group and dimensions
// of q+ max + q- min.
double bound(const Layer& l, std::size_t c) {
  double sim = 0;
  for (std::size_t i = 0; i < d; ++i) {
    double mx = -1e300, mn = 1e300, plus = 0, minus = 0;
    for (std::size_t r = c * cluster; r < (c + 1) * cluster; ++r) mx = std::max(mx, l.keys(r, i)), mn = std::min(mn, l.keys(r, i));
    for (std::size_t h = 0; h < g; ++h) (l.queries(h, i) < 0 ? minus : plus) += l.queries(h, i);
    sim += plus * mx + minus * mn;
  }
  return sim;
}

// The best n of `candidates` by the layer's similarity, ties to the lower id.
std::vector<std::size_t> best(const Layer& l, std::vector<std::size_t> candidates, std::size_t n) {
  std::sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {  // ties: the lower id
    const double x = bound(l, a), y = bound(l, b);
    return x != y ? x > y : a < b;
  });
  candidates.resize(n);
  return candidates;
}

// Attended positions: the first cluster, the picked ones, the tail.
std::vector<long> positions(const std::vector<std::size_t>& picked, std::size_t f, std::size_t t) {
  std::vector<long> out;
  for (std::size_t r = 0; r < cluster; ++r) out.push_back(long(r));
  for (auto c : picked)
    for (std::size_t r = 0; r < cluster; ++r) out.push_back(long(c * cluster + r));
  for (std::size_t r = f * cluster; r < t; ++r) out.push_back(long(r));
  std::sort(out.begin(), out.end());
  return out;
}

// The definition, per layer: a layer that lends its pick ranks
// ceil(widen k) clusters and attends its best k; a sharing layer attends all
// of its owner's, or (rerank) its own best k among them.
std::vector<std::vector<long>> reference(const std::vector<Layer>& s, std::size_t t, std::size_t k,
                                         const kv::MpCacheOptions& o) {
  const std::size_t f = (t - 1) / cluster;
  std::vector<std::size_t> every(f - 1);
  std::iota(every.begin(), every.end(), std::size_t{1});
  std::vector<std::vector<std::size_t>> ranked(layers);
  std::vector<std::vector<long>> out;
  for (std::size_t l = 0; l < layers; ++l) {
    if (const auto owner = o.owner_of(l)) {
      const auto& lent = ranked[*owner];
      out.push_back(positions(o.share_rerank ? best(s[l], lent, std::min(k, lent.size())) : lent, f, t));
      continue;
    }
    const std::size_t wide = o.is_owner(l) ? static_cast<std::size_t>(std::ceil(o.share_widen * double(k))) : k;
    ranked[l] = best(s[l], every, std::min(wide, f - 1));
    out.push_back(positions(std::vector<std::size_t>(ranked[l].begin(), ranked[l].begin() + std::ptrdiff_t(k)), f, t));
  }
  return out;
}

// One decode step through every layer, in order, at position t - 1.
template <class P>
std::vector<std::vector<long>> step(P& p, const std::vector<Layer>& s, std::size_t t, std::size_t budget,
                                    const kv::MpCacheOptions& o) {
  kv::MpCache<P> policy(budget, o);
  policy.reset(layers, 1);
  std::vector<std::vector<long>> out;
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<kv::HeadCache<P>> cache{{secret(p, s[l].keys), secret(p, s[l].keys)}};
    std::vector<typename P::Share> queries{secret(p, s[l].queries)};
    kv::StepView<P> view{l, t - 1, g, &queries, &cache};
    auto sel = run(kv::materialize(p, run(policy.select(p, view))));
    RingTensor r = run(p.reveal(sel.positions[0]));
    std::vector<long> pos;
    for (Ring v : r) pos.push_back(static_cast<long>(static_cast<std::int64_t>(v)));
    std::sort(pos.begin(), pos.end());
    out.push_back(pos);
  }
  return out;
}

kv::MpCacheOptions ours(std::vector<std::pair<std::size_t, std::size_t>> pairs, double widen, bool rerank) {
  kv::MpCacheOptions o;
  o.cluster = cluster;
  o.rank_ahead = false;  // the step's own queries, as the reference
  o.share_pairs = std::move(pairs);
  o.share_widen = widen;
  o.share_rerank = rerank;
  return o;
}
}  // namespace

TEST_SUITE("kv layer sharing") {
  TEST_CASE("MPCache's sharing variants select as defined, on ref and plain") {
    const std::size_t budget = cluster * 5, k = 3;  // first cluster, 3 picked, the tail
    struct Case {
      const char* name;
      kv::MpCacheOptions o;
    };
    const std::vector<Case> cases = {
        {"layer 3 takes layer 1's pick", ours({{3, 1}}, 1.0, false)},
        {"layers 2 and 3 take layer 0's, widened 2x", ours({{2, 0}, {3, 0}}, 2.0, false)},
        {"layer 3 reranks layer 1's 2x", ours({{3, 1}}, 2.0, true)},
        {"layer 3 reranks layer 2's 1.5x", ours({{3, 2}}, 1.5, true)},
        {"a pair beyond the model's layers shares nothing", ours({{5, 0}}, 1.0, false)},
    };
    for (const auto& c : cases)
      for (std::uint64_t seed : {41u, 42u, 43u})
        for (std::size_t t : {cluster * 13 + 2, cluster * 13}) {  // the second fills a cluster with the current token
          CAPTURE(c.name);
          CAPTURE(seed);
          CAPTURE(t);
          const auto s = scene(t, seed);
          const auto expect = reference(s, t, k, c.o);
          Ref r;
          const auto got = step(r, s, t, budget, c.o);
          CHECK(got == expect);
          Plain q;
          CHECK(step(q, s, t, budget, c.o) == expect);
        }
    // The variants are not vacuous: on one of the scenes, the reranked pick
    // differs from both the owner's and the layer's own.
    bool differs = false;
    for (std::uint64_t seed : {41u, 42u, 43u}) {
      const auto s = scene(cluster * 13 + 2, seed);
      const auto alone = reference(s, cluster * 13 + 2, k, ours({}, 1.0, false));
      const auto reranked = reference(s, cluster * 13 + 2, k, ours({{3, 1}}, 2.0, true));
      differs = differs || (reranked[3] != alone[3] && reranked[3] != alone[1]);
    }
    CHECK(differs);
  }

  TEST_CASE("MPCache refuses sharing pairs it cannot run") {
    CHECK_THROWS_WITH_AS(kv::MpCache<Ref>(20, ours({{1, 3}}, 1.0, false)), doctest::Contains("comes after it"), Error);
    CHECK_THROWS_WITH_AS(kv::MpCache<Ref>(20, ours({{1, 0}, {2, 1}}, 1.0, false)), doctest::Contains("cannot lend one"),
                         Error);
    CHECK_THROWS_WITH_AS(kv::MpCache<Ref>(20, ours({{3, 0}, {3, 1}}, 1.0, false)), doctest::Contains("two layers"), Error);
    CHECK_THROWS_WITH_AS(kv::MpCache<Ref>(20, ours({{1, 0}}, 0.5, false)), doctest::Contains("at least 1"), Error);
  }
}
