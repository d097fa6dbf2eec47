#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <sstream>
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"

using namespace mpcache;

namespace {
const std::filesystem::path fixture = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";

struct Expected {
  std::vector<std::uint32_t> tokens;
  std::vector<std::vector<double>> logits;  // per position
};

Expected read_expected() {
  std::ifstream in(fixture / "expected_logits.txt");
  REQUIRE(in);
  std::string line;
  std::getline(in, line);  // comment
  std::getline(in, line);
  Expected e;
  std::istringstream toks(line);
  for (std::uint32_t t; toks >> t;) e.tokens.push_back(t);
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::vector<double> r;
    for (double v; row >> v;) r.push_back(v);
    e.logits.push_back(std::move(r));
  }
  return e;
}

using testing::run;

template <class P>
RealTensor to_real(P& p, const typename P::Share& s) {
  if constexpr (ExactReals<P>) {
    return p.to_real(s);
  } else {
    return FixedPoint(p.frac_bits()).decode(run(p.reveal(s)));
  }
}

// Prefill all tokens but the last, then decode the last: the decode path
// (KV cache, RoPE at the right position) must give the same logits.
template <class P>
std::pair<RealTensor, RealTensor> forward(P& p, const Expected& e) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
  Decoder<P> decoder(weights);
  kv::FullCache<P> full;
  std::vector<std::uint32_t> head(e.tokens.begin(), e.tokens.end() - 1);
  auto prefill = to_real(p, run(decoder.prefill(p, full, 0, head, head.size())));
  auto last = to_real(p, run(decoder.decode(p, full, 0, e.tokens.back())));
  CHECK(decoder.length() == e.tokens.size());
  return {prefill, last};
}
// Largest |logit - expected| over the prefilled positions and the decoded one.
double max_error(const std::pair<RealTensor, RealTensor>& got, const Expected& e) {
  const auto& [prefill, last] = got;
  double worst = 0;
  for (std::size_t t = 0; t + 1 < e.tokens.size(); ++t)
    for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(prefill(t, v) - e.logits[t][v]));
  for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(last(0, v) - e.logits.back()[v]));
  return worst;
}
}  // namespace

TEST_SUITE("decoder") {
  TEST_CASE("LLaMA forward on ref matches the Python float64 reference to 1e-9") {
    const Expected e = read_expected();
    REQUIRE(e.logits.size() == e.tokens.size());
    Ref p;
    const double worst = max_error(forward(p, e), e);
    CHECK(worst < 1e-9);
  }

  TEST_CASE("LLaMA forward on plain (fixed point) agrees with ref within fixed-point error") {
    const Expected e = read_expected();
    Plain p;
    const double worst = max_error(forward(p, e), e);
    MESSAGE("plain vs float64, max |logit error| = " << worst);
    CHECK(worst < 5e-2);
  }

  TEST_CASE("bad input is refused with a clear error") {
    Ref p;
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    auto weights = run(load_llama(p, c, random_weights(1)));
    Decoder<Ref> decoder(weights);
    kv::FullCache<Ref> full;
    CHECK_THROWS_WITH_AS(run(decoder.decode(p, full, 0, 1u)), doctest::Contains("before prefill"), Error);
    CHECK_THROWS_WITH_AS(run(decoder.prefill(p, full, 0, std::vector<std::uint32_t>{1, 999}, 2)),
                         doctest::Contains("outside the vocabulary"), Error);
    CHECK_THROWS_WITH_AS(run(decoder.prefill(p, full, 0, std::vector<std::uint32_t>(200, 1), 200)),
                         doctest::Contains("max_position_embeddings"), Error);
    auto bad = [](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
      if (name == "model.norm.weight") return std::nullopt;
      return RealTensor::zeros(shape);
    };
    CHECK_THROWS_WITH_AS(run(load_llama(p, c, bad)), doctest::Contains("model.norm.weight"), Error);
  }

  TEST_CASE("a config with fewer layers than the weights file is refused unless allowed") {
    ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    REQUIRE(c.num_layers == 2);
    c.num_layers = 1;  // as a config.json saying num_hidden_layers 1 beside a 2-layer file
    Ref p;
    CHECK_THROWS_WITH_AS(run(load_llama(p, c, weights_from_file(fixture / "model.safetensors"))),
                         doctest::Contains("'model.layers.1."), Error);
    auto truncated = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors", UnusedTensors::allow)));
    CHECK(truncated.layers.size() == 1);
    // The whole model uses every tensor of its file.
    c.num_layers = 2;
    CHECK(run(load_llama(p, c, weights_from_file(fixture / "model.safetensors"))).layers.size() == 2);
  }
}

namespace {
// The last logits of the fixture model decoding an Emma sentence under
// MPCache (budget 16: the first cluster, two picked, the tail) after a
// 64-token prefill, on backend p.
template <class Proto>
auto mpcache_last_logits(Proto& p, const kv::MpCacheOptions& o) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  std::vector<std::uint32_t> tokens;
  for (unsigned char ch : std::string("Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy"))
    tokens.push_back(ch);
  const std::size_t prefix = 64;
  auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
  Decoder<Proto> decoder(weights);
  kv::MpCache<Proto> policy(16, o);
  std::vector<std::uint32_t> head(tokens.begin(), tokens.begin() + prefix);
  run(decoder.prefill(p, policy, 0, head, prefix));
  typename Proto::Share l;
  for (std::size_t t = prefix; t < tokens.size(); ++t) l = run(decoder.decode(p, policy, 0, tokens[t]));
  return to_real(p, l);
}
}  // namespace

TEST_SUITE("decoder with policies") {
  TEST_CASE("every policy whose budget covers the sequence decodes exactly like the full cache") {
    Ref p;
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
    std::vector<std::uint32_t> tokens;
    for (unsigned char ch : std::string("It is a truth universally acknowledged, that a single man")) tokens.push_back(ch);
    const std::size_t prefix = 40;
    auto decode_all = [&](auto policy) {
      Decoder<Ref> decoder(weights);
      std::vector<std::uint32_t> head(tokens.begin(), tokens.begin() + prefix);
      run(decoder.prefill(p, policy, 0, head, prefix));
      RealTensor out = RealTensor::zeros({tokens.size() - prefix, std::size_t{256}});
      for (std::size_t t = prefix; t < tokens.size(); ++t) {
        auto l = p.to_real(run(decoder.decode(p, policy, 0, tokens[t])));
        for (std::size_t v = 0; v < 256; ++v) out(t - prefix, v) = l(0, v);
      }
      return out;
    };
    const auto full = decode_all(kv::FullCache<Ref>{});
    const std::size_t budget = 64;  // > 57 tokens
    CHECK(testing::max_abs_diff(decode_all(kv::StreamingLlm<Ref>(budget)), full) < 1e-12);
    CHECK(testing::max_abs_diff(decode_all(kv::H2O<Ref>(budget)), full) < 1e-12);
    CHECK(testing::max_abs_diff(decode_all(kv::SnapKv<Ref>(budget)), full) < 1e-12);
    CHECK(testing::max_abs_diff(decode_all(kv::LongCache<Ref>(budget)), full) < 1e-12);
    CHECK(testing::max_abs_diff(decode_all(kv::Quest<Ref>(budget)), full) < 1e-12);
    CHECK(testing::max_abs_diff(decode_all(kv::MpCache<Ref>(budget)), full) < 1e-12);
    // A small budget really changes the attention (and so the logits).
    CHECK(testing::max_abs_diff(decode_all(kv::StreamingLlm<Ref>(12)), full) > 1e-6);
  }

  TEST_CASE("MPCache decodes on plain like on ref, within fixed-point error") {
    auto o = kv::MpCacheOptions::paper();
    o.cluster = 4;
    Ref r;
    Plain pl;
    const auto a = mpcache_last_logits(r, o), b = mpcache_last_logits(pl, o);
    MESSAGE("MPCache decode, plain vs ref: max |logit error| = " << testing::max_abs_diff(a, b));
    CHECK(testing::max_abs_diff(a, b) < 5e-2);
  }

}

namespace {
// Forwards to MPCache and records, per party, the rounds each layer's
// select took (the critical path of the selection alone).
struct CountingMpCache {
  kv::MpCache<Rss3> inner;
  std::function<std::uint64_t()> clock;
  std::vector<std::uint64_t>* select_rounds;  // per layer, last step
  std::string name() const { return inner.name(); }
  void reset(std::size_t l, std::size_t h) {
    inner.reset(l, h);
    select_rounds->assign(l, 0);
  }
  Task<void> after_prefill(Rss3& p, const kv::PrefillView<Rss3>& v) { return inner.after_prefill(p, v); }
  Task<kv::Selection<Rss3>> select(Rss3& p, const kv::StepView<Rss3>& v) {
    const auto start = clock();
    auto s = co_await inner.select(p, v);
    (*select_rounds)[v.layer] = clock() - start;
    co_return s;
  }
  Task<void> observe(Rss3& p, const kv::StepView<Rss3>& v, const std::vector<Rss3::Share>& probs) {
    return inner.observe(p, v, probs);
  }
  Task<void> prefetch(Rss3& p, std::size_t layer, std::size_t position) { return inner.prefetch(p, layer, position); }
};

struct TokenRounds {
  std::uint64_t per_token = 0;                // critical path of one decode step
  std::vector<std::uint64_t> select_rounds;   // per layer, max over parties
};

// 4-layer random LLaMA under rss3: prefill 60 tokens (30 kept), decode 3;
// rounds of the third decode step (steady: no cluster fills).
TokenRounds decode_rounds(bool share_layers) {
  ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  c.num_layers = 4;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  std::array<std::vector<std::uint64_t>, 3> selects;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .insecure_seed = 3});
    Rss3 p = state->session();
    auto weights = co_await load_llama(p, c, id == 0 ? random_weights(4, 0.3) : no_weights());
    Decoder<Rss3> decoder(weights);
    auto o = kv::MpCacheOptions::paper();
    o.cluster = 4;
    o.share_layers = share_layers;
    CountingMpCache policy{kv::MpCache<Rss3>(16, o), [&network, id] { return network.endpoint(id).costs().rounds; },
                           &selects[id]};
    std::vector<std::uint32_t> prompt;
    for (std::size_t i = 0; i < 60; ++i) prompt.push_back(static_cast<std::uint32_t>((i * 37) % 251));
    auto mine = [id](auto v) { return id == 0 ? std::optional(v) : std::nullopt; };
    co_await decoder.prefill(p, policy, 0, mine(prompt), prompt.size());
    co_await decoder.decode(p, policy, 0, mine(7u));
    co_await decoder.decode(p, policy, 0, mine(9u));  // a cluster fills (32 kept tokens)
    before[id] = network.endpoint(id).costs();
    co_await decoder.decode(p, policy, 0, mine(11u));  // a steady step
    after[id] = network.endpoint(id).costs();
  });
  TokenRounds r;
  r.per_token = testing::critical_rounds(before, after);
  r.select_rounds.assign(4, 0);
  for (const auto& s : selects)
    for (std::size_t l = 0; l < 4; ++l) r.select_rounds[l] = std::max(r.select_rounds[l], s[l]);
  return r;
}
}  // namespace

TEST_SUITE("decoder rounds") {
  TEST_CASE("layer index sharing saves at least the shared layer's selection rounds per token") {
    const TokenRounds with = decode_rounds(true), without = decode_rounds(false);
    MESSAGE("rounds per token: " << with.per_token << " with sharing, " << without.per_token
                                 << " without; layer 3 selection without sharing: " << without.select_rounds[3]);
    CHECK(with.select_rounds[3] == 0);  // layer 2's one-hot rows, nothing to compute
    CHECK(without.select_rounds[3] >= 16);
    // A selecting layer's selection costs 16 rounds on the critical path here
    // (similarity 1, rank top-2 15: tests/kv/rounds_test.cpp); a party's own
    // clock over the call (select_rounds) counts more, as it also waits for
    // peers that are behind.
    CHECK(with.per_token + 16 <= without.per_token);
  }
}

namespace {
struct RankingRun {
  std::uint64_t per_token = 0;                          // critical path of the last (steady) step
  std::vector<std::uint64_t> step_rounds;               // of each step
  std::uint64_t bytes = 0;                              // its bytes, party 0
  std::vector<std::vector<std::uint64_t>> picked_ids;   // per step: every layer's and head's picked clusters
};

// The 4-layer random LLaMA of decode_rounds (layer 3 shares layer 2's
// picks), MPCache ranking before or after the norm, or ahead (a step's
// query picks for the next step); 3 decode steps, the second one fills a
// cluster.
RankingRun ranking_run(bool early, bool ahead = false) {
  ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  c.num_layers = 4;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  std::vector<std::vector<std::uint64_t>> ids;
  std::vector<std::uint64_t> rounds;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .insecure_seed = 3});
    Rss3 p = state->session();
    auto weights = co_await load_llama(p, c, id == 0 ? random_weights(4, 0.3) : no_weights());
    Decoder<Rss3> decoder(weights);
    decoder.set_early_ranking(early);
    auto o = kv::MpCacheOptions::paper();
    o.cluster = 4;
    o.rank_ahead = ahead;
    kv::MpCache<Rss3> policy(16, o);
    std::vector<std::uint32_t> prompt;
    for (std::size_t i = 0; i < 60; ++i) prompt.push_back(static_cast<std::uint32_t>((i * 37) % 251));
    auto mine = [id](auto v) { return id == 0 ? std::optional(v) : std::nullopt; };
    co_await decoder.prefill(p, policy, 0, mine(prompt), prompt.size());
    for (std::uint32_t token : {7u, 9u, 11u}) {
      before[id] = network.endpoint(id).costs();
      co_await decoder.decode(p, policy, 0, mine(token));
      after[id] = network.endpoint(id).costs();
      if (id == 0) rounds.push_back(after[id].rounds - before[id].rounds);
      std::vector<std::uint64_t> step;
      for (std::size_t l = 0; l < c.num_layers; ++l)
        for (std::size_t j = 0; j < c.num_kv_heads; ++j) {
          auto opened = co_await p.reveal(*policy.last_ids(l, j));
          step.insert(step.end(), opened.begin(), opened.end());
        }
      if (id == 0) ids.push_back(std::move(step));
    }
  });
  RankingRun r;
  r.per_token = testing::critical_rounds(before, after);
  r.bytes = after[0].payload_bytes_sent() - before[0].payload_bytes_sent();
  r.picked_ids = std::move(ids);
  r.step_rounds = std::move(rounds);
  return r;
}
}  // namespace

// The wrapper a private generation goes through (run-time choice) must not
// hide early ranking from the decoder.
static_assert(kv::EarlyRanking<kv::MpCache<Rss3>, Rss3>);
static_assert(kv::EarlyRanking<kv::AnyPolicy<Rss3>, Rss3>);

TEST_SUITE("decoder rounds") {
  TEST_CASE("early ranking: the same clusters, picked while the norm runs") {
    const RankingRun early = ranking_run(true), late = ranking_run(false);
    MESSAGE("rounds per token: " << early.per_token << " ranking early, " << late.per_token << " after the norm; bytes "
                                 << early.bytes << " / " << late.bytes << "; party 0's steps early " << early.step_rounds[0]
                                 << ", " << early.step_rounds[1] << ", " << early.step_rounds[2] << ", late "
                                 << late.step_rounds[0] << ", " << late.step_rounds[1] << ", " << late.step_rounds[2]);
    // The same picks at every step, the cluster-filling one included.
    CHECK(early.picked_ids == late.picked_ids);
    // After the norm, a selecting layer waits for the norm (12 rounds), RoPE
    // (1) and the selection (17: tests/kv/rounds_test.cpp). Early, the
    // selection starts after the ranking projection and RoPE (2 rounds) and
    // ends 19 rounds in, where q is ready at 13: 11 rounds fewer in each of
    // the three selecting layers, of which the clocks' overlap (a
    // comparison's lead starts at once) absorbs one.
    CHECK(early.per_token + 3 * 11 - 1 == late.per_token);
    // The cluster the second step's token completes is summarised while
    // the rest of its layer runs (prefetch): that step costs no more than
    // the steady third (party 0's rounds), up to two rounds: which party
    // leads each comparison rotates with the forks a protocol object has
    // made, and the summary's forks shift the rotation of what follows
    // (on the critical path, the summary would add its comparison tree).
    REQUIRE(early.step_rounds.size() == 3);
    CHECK(early.step_rounds[1] <= early.step_rounds[2] + 2);
    CHECK(late.step_rounds[1] <= late.step_rounds[2] + 2);
  }
}

TEST_SUITE("decoder rounds") {
  TEST_CASE("ranking ahead: a step's query picks the next step's clusters while its layer finishes") {
    const RankingRun early = ranking_run(true), late = ranking_run(false), ahead = ranking_run(true, true);
    MESSAGE("rounds per token: " << ahead.per_token << " ranking ahead, " << early.per_token << " ranking early; bytes "
                                 << ahead.bytes << " / " << early.bytes << " / " << late.bytes << " after the norm; party 0's steps ahead "
                                 << ahead.step_rounds[0] << ", " << ahead.step_rounds[1] << ", " << ahead.step_rounds[2]);
    // The first step after the prompt has no pick made ahead: it ranks for
    // itself after the norm (not early: every later step then has its
    // streams), as without the option, and picks the same clusters.
    CHECK(ahead.picked_ids.at(0) == late.picked_ids.at(0));
    CHECK(ahead.picked_ids.at(0) == early.picked_ids.at(0));
    CHECK(ahead.step_rounds.at(0) == late.step_rounds.at(0));
    // Later steps take the pick the step before made: no ranking on their
    // critical path. Early ranking left 5 rounds of each selecting layer's
    // selection past the norm here (the three selecting layers; at the
    // LLaMA-2 shapes of the long-context preset, about 35 per layer).
    CHECK(ahead.per_token + 3 * 5 == early.per_token);
    // The work moved, it did not change: a steady step ranks once per
    // selecting layer over the lists with its token in them, as ranking
    // after the norm does (early ranking's lists lack the token).
    CHECK(ahead.bytes == late.bytes);
  }

  TEST_CASE("ranking ahead decodes on plain like on ref, within fixed-point error") {
    kv::MpCacheOptions o;  // our defaults, which rank ahead
    o.cluster = 4;
    REQUIRE(o.rank_ahead);
    Ref r;
    Plain pl;
    const auto a = mpcache_last_logits(r, o), b = mpcache_last_logits(pl, o);
    MESSAGE("MPCache ranking ahead, plain vs ref: max |logit error| = " << testing::max_abs_diff(a, b));
    CHECK(testing::max_abs_diff(a, b) < 5e-2);
  }

}
