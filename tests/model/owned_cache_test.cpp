// A policy that keeps its own cache (owns_cache: MPCache) holds the prompt
// once: the decoder keeps only the rows the policy has not taken, which
// changes no round, byte or output. Pinned exactly: the decoder's bytes, and
// every step's costs and logits against the same policy over the whole cache.
// Also: a probe keeps the whole cache; start_from_cache takes the last row
// only for such a policy, and decodes from it at the same cost.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"

using namespace mpcache;

namespace {
const std::filesystem::path fixture = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";
constexpr std::size_t word_pair = 2 * sizeof(Ring);  // an rss3 share of one value

kv::MpCacheOptions small_clusters() {
  auto o = kv::MpCacheOptions::paper();  // static eviction and layer sharing: the most state
  o.cluster = 4;
  return o;
}

// MPCache as the runs below build it (budget 16, clusters of 4).
struct Owned : kv::MpCache<Rss3> {
  Owned() : kv::MpCache<Rss3>(16, small_clusters()) {}
};

// MPCache with every member forwarded but owns_cache: the decoder keeps the
// whole cache beside it, as before MPCache kept its own.
struct WholeCache {
  kv::MpCache<Rss3> inner{16, small_clusters()};
  std::string name() const { return inner.name(); }
  void reset(std::size_t layers, std::size_t heads) { inner.reset(layers, heads); }
  Task<void> after_prefill(Rss3& p, const kv::PrefillView<Rss3>& v) { return inner.after_prefill(p, v); }
  Task<kv::Selection<Rss3>> select(Rss3& p, const kv::StepView<Rss3>& s) { return inner.select(p, s); }
  Task<void> observe(Rss3& p, const kv::StepView<Rss3>& s, const std::vector<Rss3::Share>& w) {
    return inner.observe(p, s, w);
  }
  Task<void> prefetch(Rss3& p, std::size_t layer, std::size_t position) { return inner.prefetch(p, layer, position); }
  bool ranks_early(std::size_t layer) const { return inner.ranks_early(layer); }
  Task<void> rank(Rss3& p, const kv::RankView<Rss3>& v) { return inner.rank(p, v); }
  std::size_t resident_bytes() const { return inner.resident_bytes(); }
};

// fn(id, p, decoder, endpoint) -> Task<void> at each party: rss3, 2 random
// LLaMA layers of the fixture's shape.
template <class Fn>
void with_decoder(Fn fn) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.insecure_seed = 5});
    Rss3 p = state->session();
    auto weights = co_await load_llama(p, c, id == 0 ? random_weights(6, 0.3) : no_weights());
    Decoder<Rss3> decoder(weights);
    co_await fn(id, p, decoder, network.endpoint(id));
  });
}

struct Run {
  std::array<std::vector<CostCounters>, 3> costs;  // per party: prefill, then each step
  std::array<std::vector<RingTensor>, 3> logits;   // per party: the prefill's last row, then each step's
  std::array<std::size_t, 3> decoder_bytes{}, policy_bytes{};
};

constexpr std::size_t prompt_tokens = 40, steps = 3;

// 2 random LLaMA layers of the fixture's shape: a 40-token prefill, 3 steps.
template <class Pol>
Run generate(bool probed = false) {
  Run run;
  with_decoder([&](PartyId id, Rss3& p, Decoder<Rss3>& decoder, Endpoint& endpoint) -> Task<void> {
    if (probed) decoder.set_probe([](std::size_t, std::size_t, const Rss3::Share&, const Rss3::Share&, const Rss3::Share&) {});
    Pol policy;
    std::vector<std::uint32_t> prompt;
    for (std::size_t i = 0; i < prompt_tokens; ++i) prompt.push_back(static_cast<std::uint32_t>((i * 37) % 251));
    auto mine = [id](auto v) { return id == 0 ? std::optional(v) : std::nullopt; };
    CostCounters before = endpoint.costs();
    auto out = co_await decoder.prefill(p, policy, 0, mine(prompt), prompt.size());
    run.costs[id].push_back(endpoint.costs() - before);
    run.logits[id].push_back(co_await p.reveal(ops::rows<Rss3>(out, prompt_tokens - 1, prompt_tokens)));
    for (std::size_t s = 0; s < steps; ++s) {
      before = endpoint.costs();
      out = co_await decoder.decode(p, policy, 0, mine(std::uint32_t(7 + s)));
      run.costs[id].push_back(endpoint.costs() - before);
      run.logits[id].push_back(co_await p.reveal(out));
    }
    run.decoder_bytes[id] = decoder.cache_bytes();
    run.policy_bytes[id] = *kv::OptionalMembers<Rss3>::resident_bytes(policy);
  });
  return run;
}


constexpr std::size_t prepared_tokens = 64;

struct Prepared {
  std::array<std::size_t, 3> started_bytes{}, stepped_bytes{}, released_bytes{};
  std::array<CostCounters, 3> step{};
  std::array<RingTensor, 3> logits;
  std::array<std::string, 3> refused, refused_probed;
};

// A prepared 64-token cache (random shares), MPCache's prepared eviction
// state, one decode step; the decoder given the prompt's last row or all of
// it. Then (whole prompt) static eviction over it and release_taken_prompt,
// and what start_from_cache refuses.
Prepared prepared(bool last_row) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  const std::size_t t = prepared_tokens, kvh = c.num_kv_heads, d = c.head_dim, g = c.num_heads / kvh;
  Prepared out;
  with_decoder([&](PartyId id, Rss3& p, Decoder<Rss3>& decoder, Endpoint& endpoint) -> Task<void> {
    const FixedPoint fp(p.frac_bits());
    auto secret = [&](const Shape& s, std::uint64_t seed) {
      return testing::share_of(p, 0, fp.encode(testing::random_real(s, -1, 1, seed)));
    };
    const kv::HeadCache<Rss3> whole{co_await secret({t, d}, 1), co_await secret({t, d}, 2)};
    const kv::HeadCache<Rss3> last{ops::rows<Rss3>(whole.keys, t - 1, t), ops::rows<Rss3>(whole.values, t - 1, t), t - 1};
    using Cache = std::vector<std::vector<kv::HeadCache<Rss3>>>;
    Owned policy;
    const std::size_t keep = policy.kept_tokens(t);
    RingTensor iota = RingTensor::from_shape({keep});
    for (std::size_t i = 0; i < keep; ++i) iota(i) = i;
    const std::vector<Rss3::Share> positions(kvh, ops::public_share(p, whole.keys, iota));
    const std::vector<kv::HeadCache<Rss3>> kept(kvh, {ops::rows<Rss3>(whole.keys, 0, keep),
                                                      ops::rows<Rss3>(whole.values, 0, keep)});
    decoder.start_from_cache(policy, Cache(c.num_layers, {kvh, last_row ? last : whole}), t);
    out.started_bytes[id] = decoder.cache_bytes();
    for (std::size_t l = 0; l < c.num_layers; ++l) co_await policy.start_evicted(p, l, t, kept, positions);
    const CostCounters before = endpoint.costs();
    auto logits = co_await decoder.decode(p, policy, 0, id == 0 ? std::optional<std::uint32_t>(5) : std::nullopt);
    out.step[id] = endpoint.costs() - before;
    out.logits[id] = co_await p.reveal(logits);
    out.stepped_bytes[id] = decoder.cache_bytes();
    if (last_row) co_return;
    // Static eviction over the whole prompt, then the decoder lets it go.
    const std::vector<Rss3::Share> probs(kvh, co_await secret({g * t, t}, 3));
    decoder.start_from_cache(policy, Cache(c.num_layers, {kvh, whole}), t);
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      kv::PrefillView<Rss3> view{l, t, g, &probs, &decoder.cache()[l]};
      co_await policy.after_prefill(p, view);
    }
    decoder.release_taken_prompt(policy);
    out.released_bytes[id] = decoder.cache_bytes();
    // A policy that reads the decoder's cache needs all of it ...
    kv::FullCache<Rss3> full;
    try {
      decoder.start_from_cache(full, Cache(c.num_layers, {kvh, last}), t);
    } catch (const Error& e) {
      out.refused[id] = e.what();
    }
    // ... and so does a probe.
    decoder.set_probe([](std::size_t, std::size_t, const Rss3::Share&, const Rss3::Share&, const Rss3::Share&) {});
    try {
      decoder.start_from_cache(policy, Cache(c.num_layers, {kvh, last}), t);
    } catch (const Error& e) {
      out.refused_probed[id] = e.what();
    }
  });
  return out;
}
}  // namespace

TEST_SUITE("a policy's own cache") {
  TEST_CASE("MPCache keeps the prompt once: the decoder holds the newest row, costs and logits unchanged") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    CHECK(kv::OptionalMembers<Rss3>::owns_cache(Owned{}));
    CHECK_FALSE(kv::OptionalMembers<Rss3>::owns_cache(WholeCache{}));
    const Run owned = generate<Owned>();
    const Run whole = generate<WholeCache>();
    const std::size_t heads = c.num_layers * c.num_kv_heads, row = 2 * c.head_dim * word_pair;  // a key and a value
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(owned.decoder_bytes[i] == heads * row);                                  // the newest token only
      CHECK(whole.decoder_bytes[i] == heads * (prompt_tokens + steps) * row);        // every token
      CHECK(owned.policy_bytes[i] == whole.policy_bytes[i]);                         // the same lists and summaries
      REQUIRE(owned.costs[i].size() == steps + 1);
      for (std::size_t s = 0; s <= steps; ++s) {
        CAPTURE(s);
        CHECK(owned.costs[i][s].rounds == whole.costs[i][s].rounds);
        CHECK(owned.costs[i][s].payload_bytes_sent() == whole.costs[i][s].payload_bytes_sent());
        CHECK(owned.logits[i][s] == whole.logits[i][s]);
      }
    }
  }

  TEST_CASE("probed, the decoder keeps MPCache's whole cache (the probe attends over it)") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    const Run probed = generate<Owned>(/*probed=*/true);
    const std::size_t heads = c.num_layers * c.num_kv_heads, row = 2 * c.head_dim * word_pair;
    for (std::size_t i = 0; i < 3; ++i) CHECK(probed.decoder_bytes[i] == heads * (prompt_tokens + steps) * row);
  }

  // The bench's prepared caches (paper presets): MPCache's prepared eviction
  // state beside the prompt's last row only, as a prefill leaves the decoder.
  TEST_CASE("start_from_cache: MPCache beside the prompt's last row decodes as beside the whole prompt") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    const Prepared last = prepared(/*last_row=*/true), whole = prepared(/*last_row=*/false);
    const std::size_t heads = c.num_layers * c.num_kv_heads, row = 2 * c.head_dim * word_pair;
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(last.started_bytes[i] == heads * row);
      CHECK(whole.started_bytes[i] == heads * prepared_tokens * row);
      CHECK(last.stepped_bytes[i] == heads * row);  // a step leaves the newest row only
      CHECK(whole.stepped_bytes[i] == heads * row);
      CHECK(last.step[i].rounds == whole.step[i].rounds);
      CHECK(last.step[i].payload_bytes_sent() == whole.step[i].payload_bytes_sent());
      CHECK(last.step[i].rounds > 0);
      CHECK(last.logits[i] == whole.logits[i]);
      CHECK(whole.released_bytes[i] == heads * row);
      CHECK(whole.refused[i].find("a cache from token 63, but policy full does not keep the prompt itself") !=
            std::string::npos);
      CHECK(whole.refused_probed[i].find("is probed (the probe attends over the whole cache)") != std::string::npos);
    }
  }
}
