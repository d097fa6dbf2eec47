// Every policy under MPC: rss3 and add2 select the same tokens as float64
// (`Ref`) over a prefill and a few decode steps of a small random cache,
// with the attention each step observes fed back (accumulated-attention
// policies). Scores are continuous random values, so a top-k boundary lands
// on a near tie only by chance; the seeds are fixed.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/parties.hpp"
#include "../support/run_task.hpp"

using namespace mpcache;

namespace {
using testing::random_real;

// One layer, `heads` KV heads, a prompt of `prompt` tokens, then `steps`
// decode steps.
struct Scene {
  std::size_t heads = 2, d = 4, g = 2, prompt = 40, steps = 4;
  std::vector<RealTensor> keys, values;            // per head (prompt + steps, d)
  std::vector<RealTensor> prefill_probs;           // per head (g * prompt, prompt), causal
  std::vector<std::vector<RealTensor>> queries;    // [step][head] (g, d)
  std::vector<std::vector<RealTensor>> attention;  // [step][head] (prompt + steps): weight by position
};

Scene make_scene(std::uint64_t seed) {
  Scene s;
  const std::size_t total = s.prompt + s.steps;
  for (std::size_t h = 0; h < s.heads; ++h, seed += 10) {
    s.keys.push_back(random_real({total, s.d}, -1, 1, seed));
    s.values.push_back(random_real({total, s.d}, -1, 1, seed + 1));
    RealTensor probs = random_real({s.g * s.prompt, s.prompt}, 0, 0.05, seed + 2);
    for (std::size_t r = 0; r < s.g * s.prompt; ++r)
      for (std::size_t c = r % s.prompt + 1; c < s.prompt; ++c) probs(r, c) = 0;
    s.prefill_probs.push_back(std::move(probs));
  }
  for (std::size_t step = 0; step < s.steps; ++step, seed += 10) {
    s.queries.emplace_back();
    s.attention.emplace_back();
    for (std::size_t h = 0; h < s.heads; ++h) {
      s.queries.back().push_back(random_real({s.g, s.d}, -1, 1, seed + 3 + h));
      s.attention.back().push_back(random_real({total}, 0, 1, seed + 5 + h));
    }
  }
  return s;
}

// What one party saw: per step and head, the opened positions and the
// opened first key column of the selection.
struct Trace {
  std::vector<std::vector<std::vector<long>>> positions;   // [step][head]
  std::vector<std::vector<std::vector<double>>> key_column; // [step][head]
};

template <class P>
Task<typename P::Share> secret(P& p, const RealTensor& x) {
  if constexpr (ExactReals<P>) co_return p.from_real(x);
  else co_return co_await testing::share_of(p, 0, FixedPoint(p.frac_bits()).encode(x));
}

template <class P>
double opened_real(const P& p, Ring v) {
  if constexpr (ExactReals<P>) return double(std::int64_t(v)) / std::ldexp(1.0, p.frac_bits());
  else return FixedPoint(p.frac_bits()).decode(v);
}

// The decoder's use of a policy, without a model: after_prefill, then per
// step select and observe. The attention a step observes is the scene's
// weight of each selected position (gathered at the secret positions),
// the same for every query head of the group.
template <class P, class Pol>
Task<Trace> drive(P& p, Pol& policy, const Scene& s) {
  using Share = typename P::Share;
  std::vector<kv::HeadCache<P>> full, prompt;
  std::vector<Share> probs;
  for (std::size_t h = 0; h < s.heads; ++h) {
    full.push_back({co_await secret(p, s.keys[h]), co_await secret(p, s.values[h])});
    prompt.push_back({ops::rows<P>(full[h].keys, 0, s.prompt), ops::rows<P>(full[h].values, 0, s.prompt)});
    probs.push_back(co_await secret(p, s.prefill_probs[h]));
  }
  policy.reset(1, s.heads);
  const kv::PrefillView<P> prefill{0, s.prompt, s.g, &probs, &prompt};
  co_await policy.after_prefill(p, prefill);
  Trace trace;
  for (std::size_t step = 0; step < s.steps; ++step) {
    const std::size_t t = s.prompt + step + 1;
    std::vector<kv::HeadCache<P>> cache;
    std::vector<Share> queries, weights;
    for (std::size_t h = 0; h < s.heads; ++h) {
      cache.push_back({ops::rows<P>(full[h].keys, 0, t), ops::rows<P>(full[h].values, 0, t)});
      queries.push_back(co_await secret(p, s.queries[step][h]));
      RealTensor w = RealTensor::from_shape({t});
      std::copy(s.attention[step][h].data(), s.attention[step][h].data() + t, w.data());
      weights.push_back(co_await secret(p, w));
    }
    const kv::StepView<P> view{0, s.prompt + step, s.g, &queries, &cache};
    auto selection = co_await kv::materialize(p, co_await policy.select(p, view));  // picks as rows
    trace.positions.emplace_back();
    trace.key_column.emplace_back();
    std::vector<Share> observed;
    for (std::size_t h = 0; h < s.heads; ++h) {
      const RingTensor pos = co_await p.reveal(selection.positions[h]);
      const RingTensor keys = co_await p.reveal(selection.keys[h]);
      std::vector<long> opened;
      std::vector<double> column;
      for (std::size_t i = 0; i < pos.size(); ++i) {
        opened.push_back(long(std::int64_t(pos(i))));
        column.push_back(opened_real(p, keys(i, 0)));
      }
      trace.positions.back().push_back(std::move(opened));
      trace.key_column.back().push_back(std::move(column));
      auto w = co_await kv::gather_values(p, weights[h], selection.positions[h]);  // (n)
      const std::size_t n = P::shape(w).at(0);
      observed.push_back(ops::tile_row<P>(ops::reshape<P>(w, {1, n}), s.g));
    }
    co_await policy.observe(p, view, observed);
  }
  co_return trace;
}

std::vector<long> sorted(std::vector<long> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The float64 selections, then the same under rss3 and add2 (party 0's
// view; party 1 opens the same values).
template <template <class> class Make>
void check_policy_under_mpc(std::uint64_t seed, std::size_t budget) {
  const Scene s = make_scene(seed);
  Ref r;
  auto ref_policy = Make<Ref>::make();
  const Trace expect = testing::run(drive(r, ref_policy, s));
  // The policy selects (fewer tokens than the cache) at least once.
  bool selects = false;
  for (std::size_t step = 0; step < s.steps; ++step)
    for (std::size_t h = 0; h < s.heads; ++h) {
      const auto& pos = expect.positions[step][h];
      CHECK(pos.size() <= std::max(budget, s.prompt + step + 1));
      selects = selects || pos.size() < s.prompt + step + 1;
      // The gathered keys are the cache rows at the opened positions.
      for (std::size_t i = 0; i < pos.size(); ++i)
        CHECK(expect.key_column[step][h][i] == doctest::Approx(s.keys[h](std::size_t(pos[i]), 0)).epsilon(1e-4));
    }
  if (budget < s.prompt) CHECK(selects);
  auto compare = [&](const char* backend, const Trace& got) {
    CAPTURE(backend);
    REQUIRE(got.positions.size() == s.steps);
    for (std::size_t step = 0; step < s.steps; ++step)
      for (std::size_t h = 0; h < s.heads; ++h) {
        CAPTURE(step);
        CAPTURE(h);
        const auto& pos = got.positions[step][h];
        CHECK(sorted(pos) == sorted(expect.positions[step][h]));
        REQUIRE(got.key_column[step][h].size() == pos.size());
        for (std::size_t i = 0; i < pos.size(); ++i) {
          REQUIRE(pos[i] >= 0);
          REQUIRE(std::size_t(pos[i]) < s.prompt + s.steps);
          CHECK(got.key_column[step][h][i] == doctest::Approx(s.keys[h](std::size_t(pos[i]), 0)).epsilon(1e-3));
        }
      }
  };
  auto under = [&]<class Party>(const char* backend, const auto& options) {
    using P = decltype(std::declval<Party&>().session());
    auto run = testing::run_sessions<Party>(
        [&](P& p) -> Task<Trace> {
          auto policy = Make<P>::make();
          co_return co_await drive(p, policy, s);
        },
        options);
    compare(backend, run.results[0]);
    CHECK(run.results[1].positions == run.results[0].positions);
  };
  under.template operator()<Rss3Party>("rss3 party 0", Rss3Options{.insecure_seed = seed});
  under.template operator()<Add2Party>("add2 party 0", Add2Options{.insecure_seed = seed});
}

kv::MpCacheOptions small_clusters(kv::MpCacheOptions o) {
  o.cluster = 4;
  return o;
}

template <class P> struct MakeFull { static kv::FullCache<P> make() { return {}; } };
template <class P> struct MakeStreaming { static kv::StreamingLlm<P> make() { return kv::StreamingLlm<P>(12, 4); } };
template <class P> struct MakeH2O { static kv::H2O<P> make() { return kv::H2O<P>(12, 0.5); } };
template <class P> struct MakeTova { static kv::Tova<P> make() { return kv::Tova<P>(10); } };
template <class P> struct MakeSnapKv { static kv::SnapKv<P> make() { return kv::SnapKv<P>(16, 4, 3); } };
template <class P> struct MakeLongCache { static kv::LongCache<P> make() { return kv::LongCache<P>(16, 2, 4); } };
template <class P> struct MakeInfLlm { static kv::InfLlm<P> make() { return kv::InfLlm<P>(24, 4, 2, 2); } };
template <class P> struct MakeQuest { static kv::Quest<P> make() { return kv::Quest<P>(16, 4); } };
template <kv::PageEstimate E>
struct ArkValeWith {
  template <class P> struct Make {
    static kv::ArkVale<P> make() { return kv::ArkVale<P>(16, {.page = 4, .sink_pages = 1, .estimate = E}); }
  };
};
template <class P> struct MakeArkValeRecall {  // pages in each party's file, read 2 pages at a time
  static kv::ArkVale<P> make() {
    return kv::ArkVale<P>(16, {.page = 4, .sink_pages = 1, .tier = kv::PageTier::file, .chunk_pages = 2});
  }
};
template <class P> struct MakeMpCache {
  static kv::MpCache<P> make() { return kv::MpCache<P>(24, small_clusters(kv::MpCacheOptions{})); }
};
template <class P> struct MakeMpCachePaper {
  static kv::MpCache<P> make() { return kv::MpCache<P>(24, small_clusters(kv::MpCacheOptions::paper())); }
};
}  // namespace

TEST_SUITE("kv policies under MPC") {
  TEST_CASE("full cache") { check_policy_under_mpc<MakeFull>(101, 44); }
  TEST_CASE("StreamingLLM") { check_policy_under_mpc<MakeStreaming>(102, 12); }
  TEST_CASE("H2O") { check_policy_under_mpc<MakeH2O>(103, 12); }
  TEST_CASE("TOVA") { check_policy_under_mpc<MakeTova>(104, 10); }
  TEST_CASE("SnapKV") { check_policy_under_mpc<MakeSnapKv>(105, 16); }
  TEST_CASE("LongCache") { check_policy_under_mpc<MakeLongCache>(106, 16); }
  TEST_CASE("InfLLM") { check_policy_under_mpc<MakeInfLlm>(107, 24); }
  TEST_CASE("Quest") { check_policy_under_mpc<MakeQuest>(108, 16); }
  TEST_CASE("ArkVale, cuboid-mean") {
    check_policy_under_mpc<ArkValeWith<kv::PageEstimate::cuboid_mean>::Make>(111, 16);
  }
  TEST_CASE("ArkVale, cuboid-max") { check_policy_under_mpc<ArkValeWith<kv::PageEstimate::cuboid_max>::Make>(112, 16); }
  TEST_CASE("ArkVale with recall from a backing file") { check_policy_under_mpc<MakeArkValeRecall>(114, 16); }
  TEST_CASE("ArkVale, centroid") { check_policy_under_mpc<ArkValeWith<kv::PageEstimate::centroid>::Make>(113, 16); }
  TEST_CASE("MPCache, our defaults") { check_policy_under_mpc<MakeMpCache>(109, 24); }
  TEST_CASE("MPCache, the paper's options") { check_policy_under_mpc<MakeMpCachePaper>(110, 24); }
}
