// Exact round counts of MPCache on rss3 (in-process, deterministic): the
// selection does not grow with the KV head count, summaries are paid once
// per cluster, and a sharing layer does no selection work.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/parties.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;

namespace {
using testing::critical_rounds;
using testing::random_real;
using testing::share_of;

struct Setting {
  std::size_t heads = 1, d = 8, g = 2;
  std::size_t prompt = 96;  // tokens at prefill
  std::size_t steps = 6;    // decode selections after it
  std::size_t budget = 16;
  std::size_t layers = 1;   // all run the same prompt; layer l >= 2 odd shares l - 1
  kv::MpCacheOptions options;
};

struct Rounds {
  std::vector<std::uint64_t> prefill;            // per layer
  std::vector<std::vector<std::uint64_t>> step;  // [step][layer]
  std::vector<std::vector<std::uint64_t>> prefetch;  // [step][layer]: prefetch(l + 1) after layer l's select
};

// Prefill then `steps` selections on random keys, every layer in turn;
// returns each call's critical-path rounds, measured from equal clocks.
Rounds measure(const Setting& s) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  const std::size_t total = s.prompt + s.steps;
  const std::size_t calls = s.layers * (1 + s.steps);
  std::vector<std::array<CostCounters, 3>> before(calls), after(calls);
  std::vector<std::array<CostCounters, 3>> before_prefetch(calls), after_prefetch(calls);
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .insecure_seed = 5});
    Rss3 p = state->session();
    const FixedPoint fp(p.frac_bits());
    std::vector<kv::HeadCache<Rss3>> full, prompt;
    std::vector<Rss3::Share> probs, queries;
    for (std::size_t h = 0; h < s.heads; ++h) {
      auto k = co_await share_of(p, 0, fp.encode(random_real({total, s.d}, -1, 1, 10 + h)));
      auto v = co_await share_of(p, 0, fp.encode(random_real({total, s.d}, -1, 1, 30 + h)));
      probs.push_back(co_await share_of(p, 0, fp.encode(random_real({s.g * s.prompt, s.prompt}, 0, 0.05, 50 + h))));
      queries.push_back(co_await share_of(p, 0, fp.encode(random_real({s.g, s.d}, -1, 1, 70 + h))));
      prompt.push_back({ops::rows<Rss3>(k, 0, s.prompt), ops::rows<Rss3>(v, 0, s.prompt)});
      full.push_back({std::move(k), std::move(v)});
    }
    kv::MpCache<Rss3> mc(s.budget, s.options);
    mc.reset(s.layers, s.heads);
    std::size_t call = 0;
    for (std::size_t l = 0; l < s.layers; ++l) {
      kv::PrefillView<Rss3> view{l, s.prompt, s.g, &probs, &prompt};
      co_await mpcache::testing::align_clocks(network.endpoint(id));
      before[call][id] = network.endpoint(id).costs();
      co_await mc.after_prefill(p, view);
      after[call++][id] = network.endpoint(id).costs();
    }
    for (std::size_t step = 0; step < s.steps; ++step) {
      std::vector<kv::HeadCache<Rss3>> cache;
      for (const auto& hc : full)
        cache.push_back({ops::rows<Rss3>(hc.keys, 0, s.prompt + step + 1), ops::rows<Rss3>(hc.values, 0, s.prompt + step + 1)});
      for (std::size_t l = 0; l < s.layers; ++l) {
        kv::StepView<Rss3> view{l, s.prompt + step, s.g, &queries, &cache};
        co_await mpcache::testing::align_clocks(network.endpoint(id));
        before[call][id] = network.endpoint(id).costs();
        auto sel = co_await mc.select(p, view);
        after[call][id] = network.endpoint(id).costs();
        // As the decoder does, concurrently with the rest of layer l.
        co_await mpcache::testing::align_clocks(network.endpoint(id));
        before_prefetch[call][id] = network.endpoint(id).costs();
        co_await mc.prefetch(p, l + 1, s.prompt + step);
        after_prefetch[call++][id] = network.endpoint(id).costs();
        REQUIRE(sel.keys.size() == s.heads);
        CHECK(kv::selected_tokens(sel, 0) <= s.budget);
      }
    }
  });
  Rounds r;
  std::size_t call = 0;
  for (std::size_t l = 0; l < s.layers; ++l) r.prefill.push_back(critical_rounds(before[call], after[call])), ++call;
  for (std::size_t step = 0; step < s.steps; ++step) {
    r.step.emplace_back();
    r.prefetch.emplace_back();
    for (std::size_t l = 0; l < s.layers; ++l, ++call) {
      r.step.back().push_back(critical_rounds(before[call], after[call]));
      r.prefetch.back().push_back(critical_rounds(before_prefetch[call], after_prefetch[call]));
    }
  }
  return r;
}

kv::MpCacheOptions small_clusters(kv::Similarity similarity = kv::Similarity::linear) {
  auto o = kv::MpCacheOptions::paper();
  o.cluster = 4;  // budget 16: first cluster + 2 picked + the tail
  o.similarity = similarity;
  return o;
}
}  // namespace

TEST_SUITE("kv rounds") {
  TEST_CASE("MPCache prefill and selection rounds do not grow with the KV head count") {
    for (auto similarity : {kv::Similarity::linear, kv::Similarity::bound})
    for (std::size_t flat_up_to : {0u, 64u}) {
      CAPTURE(similarity == kv::Similarity::bound);
      CAPTURE(flat_up_to);
      std::vector<Rounds> runs;
      for (std::size_t heads : {1u, 2u, 8u}) {
        Setting s;
        s.heads = heads;
        s.steps = 2;
        s.options = small_clusters(similarity);
        s.options.flat_up_to = flat_up_to;
        runs.push_back(measure(s));
      }
      MESSAGE("prefill rounds " << runs[0].prefill[0] << ", selection rounds " << runs[0].step[1][0]);
      for (const auto& r : runs) {
        CHECK(r.prefill == runs[0].prefill);
        CHECK(r.step == runs[0].step);
      }
      // Exact counts (deterministic in-process). Prefill: rank top-48 of 96,
      // the k-th key comparison, the slot one-hot, one compaction matmul and
      // the prompt's cluster summaries (linear: one truncation more, the
      // coarse mix). A step: similarity, top-k (the bound's query
      // sign split adds 8: msb_bits, then the sign bit selects q by bit_dot;
      // the coarse level 16, beside which every fine cluster is scored,
      // so the candidates' scores are one product with their one-hot rows;
      // no row is gathered).
      const bool bound = similarity == kv::Similarity::bound;
      CHECK(runs[0].prefill[0] == 51u);
      CHECK(runs[0].step[1][0] == (flat_up_to == 0 ? 32u : 16u) + (bound ? 8u : 0u));
    }
  }

  TEST_CASE("MPCache summarises a cluster once, off the selection's path, in the step its last token arrives") {
    Setting s;
    s.heads = 2;
    s.prompt = 97;  // keeps 48 + 1: the prompt's full clusters are summarised at prefill
    s.steps = 9;
    s.options = small_clusters();
    const Rounds r = measure(s);
    // Kept list length after step i: 49 + i + 1 tokens; a cluster fills when
    // it reaches a multiple of 4 (steps 2 and 6). Its summary (max/min over
    // 4 tokens and the coarse pair's) runs in that step's
    // prefetch, which the decoder overlaps with the rest of the layer.
    const std::uint64_t steady = r.step[0][0];
    testing::check_pinned("kv.mpcache.steady_step_rounds", steady);
    for (std::size_t i = 0; i < s.steps; ++i) {
      CAPTURE(i);
      CHECK(r.step[i][0] == steady);
      const std::size_t length = 49 + i + 1;
      if (length % 4 == 0) CHECK(r.prefetch[i][0] > 0);
      else CHECK(r.prefetch[i][0] == 0);
    }
  }

  TEST_CASE("a sharing layer does no summary, no selection and no gather") {
    Setting s;
    s.heads = 2;
    s.layers = 4;  // layer 3 shares layer 2
    s.steps = 3;
    s.options = small_clusters();
    const Rounds r = measure(s);
    CHECK(r.prefill[3] == 1);  // the owner's compaction matrix, one matmul
    for (std::size_t i = 0; i < s.steps; ++i) {
      CAPTURE(i);
      CHECK(r.step[i][3] == 0);             // layer 2's one-hot rows over its own list
      CHECK(r.prefetch[i][2] == 0);         // nothing to gather ahead (no cluster fills here)
      CHECK(r.step[i][2] == r.step[i][1]);  // layer 2 selects like any layer
      // Similarity 1, rank top-2 of 11: 15.
      testing::check_pinned("kv.mpcache.sharing_layer_step_rounds", r.step[i][2]);
    }
  }

  TEST_CASE("a layer sharing a chosen pair's pick does no selection; the owner selects like any layer") {
    Setting s;
    s.heads = 2;
    s.layers = 4;
    s.steps = 3;
    s.options = small_clusters(kv::Similarity::bound);
    s.options.keep_ratio = 1.0;  // our defaults' (no static eviction)
    s.options.share_pairs = {{3, 1}};  // (a widened pick would attend more than the budget this harness checks)
    const Rounds r = measure(s);
    CHECK(r.prefill[3] == 0);  // no eviction, no summaries of its own
    for (std::size_t i = 0; i < s.steps; ++i) {
      CAPTURE(i);
      CHECK(r.step[i][3] == 0);             // layer 1's one-hot rows over its own list
      CHECK(r.step[i][1] == r.step[i][2]);
      CHECK(r.step[i][2] > 0);
    }
  }
}
