// Per-operator cost accounting (CostTag) through the decoder on rss3: every
// round and byte of a step is charged to exactly one operator, each operator
// to the right one, and the norms' share is exactly what the norms cost alone.
// Also: decoding from a prepared cache (start_from_cache) and tied layers.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"

using namespace mpcache;

namespace {
const std::filesystem::path fixture = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";

std::size_t tag(CostTag t) { return static_cast<std::size_t>(t); }

struct Measured {
  std::array<CostCounters, 3> prefill;  // per party, the prefill's difference
  std::array<CostCounters, 3> step;     // one steady decode step's
};

// 4-layer random LLaMA: prefill 60 tokens, decode 3; the third step measured.
Measured measure(bool mpcache) {
  ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  c.num_layers = 4;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  Measured m;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .insecure_seed = 3});
    Rss3 p = state->session();
    auto weights = co_await load_llama(p, c, id == 0 ? random_weights(4, 0.3) : no_weights());
    Decoder<Rss3> decoder(weights);
    auto o = kv::MpCacheOptions::paper();
    o.cluster = 4;
    auto policy = mpcache ? kv::AnyPolicy<Rss3>(kv::MpCache<Rss3>(16, o)) : kv::AnyPolicy<Rss3>(kv::FullCache<Rss3>{});
    std::vector<std::uint32_t> prompt;
    for (std::size_t i = 0; i < 60; ++i) prompt.push_back(static_cast<std::uint32_t>((i * 37) % 251));
    auto mine = [id](auto v) { return id == 0 ? std::optional(v) : std::nullopt; };
    const CostCounters start = network.endpoint(id).costs();
    co_await decoder.prefill(p, policy, 0, mine(prompt), prompt.size());
    m.prefill[id] = network.endpoint(id).costs() - start;
    co_await decoder.decode(p, policy, 0, mine(7u));
    co_await decoder.decode(p, policy, 0, mine(9u));
    const CostCounters before = network.endpoint(id).costs();
    co_await decoder.decode(p, policy, 0, mine(11u));
    m.step[id] = network.endpoint(id).costs() - before;
  });
  return m;
}

void check_sums(const CostCounters& d) {
  std::uint64_t rounds = 0, bytes = 0;
  for (const auto& t : d.by_tag) rounds += t.rounds, bytes += t.payload_bytes_sent;
  CHECK(rounds == d.rounds);
  CHECK(bytes == d.payload_bytes_sent());
}
}  // namespace

TEST_SUITE("cost tags") {
  TEST_CASE("every round and byte of prefill and decode is charged to exactly one operator") {
    for (bool mp : {false, true}) {
      CAPTURE(mp);
      const Measured m = measure(mp);
      for (std::size_t i = 0; i < 3; ++i) {
        check_sums(m.prefill[i]);
        check_sums(m.step[i]);
        const auto& s = m.step[i].by_tag;
        for (CostTag t : {CostTag::linear, CostTag::attention, CostTag::softmax, CostTag::norm, CostTag::activation})
          CHECK(s[tag(t)].payload_bytes_sent > 0);
        CHECK(s[tag(CostTag::eviction)].payload_bytes_sent == 0);  // a decode step evicts nothing
        CHECK(s[tag(CostTag::argmax)].payload_bytes_sent == 0);    // the caller's, not the decoder's
        if (mp) {
          for (CostTag t : {CostTag::similarity, CostTag::topk, CostTag::gather})
            CHECK(s[tag(t)].payload_bytes_sent > 0);
          CHECK(m.prefill[i].by_tag[tag(CostTag::eviction)].payload_bytes_sent > 0);
          CHECK(m.prefill[i].by_tag[tag(CostTag::summary)].payload_bytes_sent > 0);
        } else {
          for (CostTag t : {CostTag::summary, CostTag::similarity, CostTag::topk, CostTag::gather})
            CHECK(s[tag(t)].payload_bytes_sent == 0);
          CHECK(m.prefill[i].by_tag[tag(CostTag::eviction)].payload_bytes_sent == 0);
        }
      }
    }
  }

  TEST_CASE("a step's norm bytes are exactly 2L + 1 RMSNorms of one row, each scaling its projections' rows") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    const Measured m = measure(false);
    const FixedPoint fp;
    const auto one = testing::measure_op(fp.encode(testing::random_real({1, c.hidden_size}, -1, 1, 9)),
                                         [&](Rss3& p, const Rss3::Share& x) -> Task<Rss3::Share> {
                                           const RealTensor ones = RealTensor::filled({c.hidden_size}, 1.0);
                                           auto gamma = ops::public_share(p, x, fp.encode(ones));
                                           co_return co_await ops::rms_norm(p, x, gamma, c.norm_eps);
                                         });
    // The decoder folds each norm's last product (d elements) into the rows
    // of the projections that follow it: q, k, v; gate, up; the LM head.
    const std::uint64_t layers = 4;  // as measure() runs it
    const std::uint64_t norms = 2 * layers + 1, d = c.hidden_size;
    const std::uint64_t scaled = layers * ((c.num_heads + 2 * c.num_kv_heads) * c.head_dim + 2 * c.intermediate_size) +
                                 c.vocab_size;
    // Summed over the parties: which party leads each comparison (and pays
    // its larger first message) rotates with the protocol object's forks.
    std::uint64_t measured = 0, want = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      measured += m.step[i].by_tag[tag(CostTag::norm)].payload_bytes_sent;
      want += norms * (one.bytes[i] - 8 * d) + 8 * scaled;
    }
    CHECK(measured == want);
  }

  TEST_CASE("a cost scope tags forks and restores the previous tag") {
    testing::run_rss3([](Rss3& p) -> Task<int> {
      CHECK(p.cost_tag() == CostTag::other);
      {
        auto outer = cost_scope(p, CostTag::softmax);
        {
          auto inner = cost_scope(p, CostTag::topk);
          CHECK(p.fork().cost_tag() == CostTag::topk);
        }
        CHECK(p.cost_tag() == CostTag::softmax);
      }
      CHECK(p.cost_tag() == CostTag::other);
      co_return 0;
    });
  }
}

TEST_SUITE("prepared cache") {
  // Tied layers decode from a prepared cache of random shares; MPCache looks
  // at it (static eviction), or takes a prepared eviction state; bad shapes
  // are refused by name.
  TEST_CASE("start_from_cache: MPCache evicts or takes a prepared state, then decodes; wrong shapes are errors") {
    ModelConfig one = ModelConfig::from_json_file(fixture / "config.json");
    one.num_layers = 1;
    const std::size_t t = 64, kvh = one.num_kv_heads, d = one.head_dim, g = one.num_heads / kvh;
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    std::array<std::string, 3> errors, kept_errors;
    std::array<std::uint64_t, 3> eviction_bytes{}, prepared_bytes{};
    std::array<std::size_t, 3> selected{};
    run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
      auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .insecure_seed = 2});
      Rss3 p = state->session();
      auto weights = tie_layers(co_await load_llama(p, one, id == 0 ? random_weights(4, 0.3) : no_weights()), 4);
      CHECK(weights.config.num_layers == 4);
      CHECK(weights.layers.size() == 1);
      Decoder<Rss3> decoder(weights);
      const FixedPoint fp(p.frac_bits());
      auto secret = [&](const Shape& s, std::uint64_t seed) {
        return testing::share_of(p, 0, fp.encode(testing::random_real(s, -1, 1, seed)));
      };
      kv::HeadCache<Rss3> head{co_await secret({t, d}, 1), co_await secret({t, d}, 2)};
      const std::vector<Rss3::Share> probs(kvh, co_await testing::share_of(
                                                    p, 0, fp.encode(testing::random_real({g * t, t}, 0, 0.05, 3))));
      auto o = kv::MpCacheOptions::paper();
      o.cluster = 4;
      kv::MpCache<Rss3> policy(16, o);
      using Cache = std::vector<std::vector<kv::HeadCache<Rss3>>>;
      try {  // three layers' caches for four layers
        decoder.start_from_cache(policy, Cache(3, {kvh, head}), t);
      } catch (const Error& e) {
        errors[id] = e.what();
      }
      // Static eviction over the prepared cache, every layer.
      decoder.start_from_cache(policy, Cache(4, {kvh, head}), t);
      const CostCounters before = network.endpoint(id).costs();
      for (std::size_t l = 0; l < 4; ++l) {
        kv::PrefillView<Rss3> view{l, t, g, &probs, &decoder.cache()[l]};
        co_await policy.after_prefill(p, view);
      }
      eviction_bytes[id] = (network.endpoint(id).costs() - before).payload_bytes_sent();
      CHECK(decoder.length() == t);
      auto logits = co_await decoder.decode(p, policy, 0, id == 0 ? std::optional<std::uint32_t>(5) : std::nullopt);
      CHECK(Rss3::shape(logits) == Shape{1, one.vocab_size});
      CHECK(decoder.length() == t + 1);
      // The state eviction leaves, prepared: summaries only.
      decoder.start_from_cache(policy, Cache(4, {kvh, head}), t);
      const std::size_t keep = policy.kept_tokens(t);
      CHECK(keep == 32);  // keep_ratio 0.5
      RingTensor iota = RingTensor::from_shape({keep});
      for (std::size_t i = 0; i < keep; ++i) iota(i) = 2 * i;
      const auto positions = ops::public_share(p, head.keys, iota);
      const kv::HeadCache<Rss3> kept{ops::rows<Rss3>(head.keys, 0, keep), ops::rows<Rss3>(head.values, 0, keep)};
      try {
        co_await policy.start_evicted(p, 0, t, {kvh, head}, {kvh, positions});
      } catch (const Error& e) {
        kept_errors[id] = e.what();
      }
      const CostCounters mid = network.endpoint(id).costs();
      for (std::size_t l = 0; l < 4; ++l) co_await policy.start_evicted(p, l, t, {kvh, kept}, {kvh, positions});
      prepared_bytes[id] = (network.endpoint(id).costs() - mid).payload_bytes_sent();
      std::vector<Rss3::Share> queries(kvh, co_await secret({g, d}, 4));
      std::vector<kv::HeadCache<Rss3>> grown(kvh, {ops::stack_rows<Rss3>(head.keys, ops::rows<Rss3>(head.keys, 0, 1)),
                                                  ops::stack_rows<Rss3>(head.values, ops::rows<Rss3>(head.values, 0, 1))});
      kv::StepView<Rss3> step{0, t, g, &queries, &grown};
      auto sel = co_await policy.select(p, step);
      selected[id] = kv::selected_tokens(sel, 0);
    });
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(errors[i].find("a cache of 3 layers for 4") != std::string::npos);
      CHECK(kept_errors[i].find("64 kept rows, static eviction keeps 32") != std::string::npos);
      CHECK(eviction_bytes[i] > prepared_bytes[i]);
      CHECK(prepared_bytes[i] > 0);  // the summaries
      CHECK(selected[i] <= 16);      // within the budget
      CHECK(selected[i] > 0);
    }
  }
  TEST_CASE("a decoder refuses layer weights that do not match the layer count") {
    ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    c.num_layers = 2;
    Ref p;
    auto weights = testing::run(load_llama(p, c, random_weights(1)));
    weights.config.num_layers = 3;
    CHECK_THROWS_WITH_AS(Decoder<Ref>{weights}, doctest::Contains("2 layer weights for 3 layers"), Error);
  }
}
