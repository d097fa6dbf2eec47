// Speculative verification (:speculate, :draft): greedy generation that
// verifies drafted tokens in K+1-row steps chooses exactly the tokens of
// greedy generation one token a step (exact truncation), for every policy
// that speculation accepts, on three prompts; rejected rows leave nothing
// behind (the steps after a rejection would go wrong otherwise). Every
// party learns each step's accepted count, the client alone the tokens.
// The rounds of a K+1-row step against a 1-row step are pinned.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"
#include "../support/fixture_generation.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;

namespace {

std::vector<std::uint32_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

const std::vector<std::vector<std::uint32_t>> prompts = {
    bytes_of("Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy"),
    bytes_of("It is a truth universally acknowledged, that a single man in possession of a good"),
    bytes_of("Mr. Knightley, a sensible man about seven or eight and thirty, was not only a very")};

struct Run {
  std::vector<std::uint32_t> tokens;                 // the client's
  std::array<std::vector<std::size_t>, 3> accepted;  // per decode step, as each party saw it
  std::array<std::vector<std::size_t>, 3> drafted;
  std::array<std::vector<std::uint64_t>, 3> rounds;  // per step (the prefill first)
  std::array<std::size_t, 3> generated{};
  // Each party's KV cache at the end: the decoder's and the policy's bytes.
  std::array<std::size_t, 3> kv_decoder_bytes{};
  std::array<std::optional<std::size_t>, 3> kv_policy_bytes{};
};

// generate_party on the fixture model, rss3 with exact truncation (seed 5).
Run generate(const std::vector<std::uint32_t>& prompt, const std::string& policy, std::size_t tokens,
             std::size_t speculate = 0, Drafter draft = {},
             const std::filesystem::path& model = testing::fixture_dir()) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  Run run;
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
    GenerationJob job;
    job.model_dir = model;
    job.mode.truncation = TruncationMode::exact;
    job.policy = policy;
    job.new_tokens = tokens;
    job.rss3.insecure_seed = 5;
    if (id == 0) {
      job.prompt = prompt;
      job.speculate = speculate;
      job.draft = draft;
    }
    GenerationObserver observer;
    observer.step = [&run, id](const GenerationStep& s) {
      run.rounds[id].push_back(s.clock_after - s.clock_before);
      if (s.phase == GenerationPhase::prefill) return;
      run.accepted[id].push_back(s.accepted);
      run.drafted[id].push_back(s.drafted);
    };
    co_return co_await generate_party(network.endpoint(id), std::move(job), std::move(observer));
  });
  CHECK(results[1].tokens.empty());
  CHECK(results[2].tokens.empty());
  run.tokens = results[0].tokens;
  for (std::size_t i = 0; i < 3; ++i) {
    run.generated[i] = results[i].generated;
    run.kv_decoder_bytes[i] = results[i].kv_decoder_bytes;
    run.kv_policy_bytes[i] = results[i].kv_policy_bytes;
  }
  return run;
}

// Drafts the known greedy text, wrong at one draft position that moves
// every step (and right in every position every K+1-th step): each count
// of accepted drafts, 0..K, happens.
Drafter oracle_with_errors(std::vector<std::uint32_t> prompt, std::vector<std::uint32_t> greedy) {
  auto steps = std::make_shared<std::size_t>(0);
  return [prompt = std::move(prompt), greedy = std::move(greedy), steps](std::span<const std::uint32_t> context,
                                                                          std::size_t count) {
    const std::size_t at = context.size() - prompt.size();  // tokens chosen so far
    std::vector<std::uint32_t> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(at + i < greedy.size() ? greedy[at + i] : 0);
    const std::size_t wrong = (*steps)++ % (count + 1);
    if (wrong < count) out[wrong] = (out[wrong] + 1) % 256;
    return out;
  };
}

std::size_t sum(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

// What every speculating run must show: the text, one accepted count per
// step that all parties agree on, and as many tokens as steps + accepted.
void check_speculative(const Run& greedy, const Run& fast, std::size_t k, std::size_t tokens,
                       const std::string& policy) {
  // Policies that keep their own cache: the decoder holds only rows they have not taken.
  const bool owns_cache = policy == "mpcache" || policy == "mpcache-paper" || policy == "arkvale-recall";
  CHECK(fast.tokens == greedy.tokens);
  REQUIRE(fast.tokens.size() == tokens);
  CHECK(fast.accepted[1] == fast.accepted[0]);
  CHECK(fast.accepted[2] == fast.accepted[0]);
  CHECK(1 + fast.accepted[0].size() + sum(fast.accepted[0]) == tokens);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(fast.generated[i] == tokens);
    // Rejected rows left nothing: the caches end as large as one token a
    // step leaves them. (A policy that keeps its own cache has taken the
    // last step's accepted rows; the decoder drops them only at the next
    // step, so it may end with up to K+1 rows a layer and head, not one.)
    CHECK(fast.kv_policy_bytes[i] == greedy.kv_policy_bytes[i]);
    const std::size_t rows = fast.kv_decoder_bytes[i] / greedy.kv_decoder_bytes[i];
    CHECK(fast.kv_decoder_bytes[i] == rows * greedy.kv_decoder_bytes[i]);
    CHECK(rows >= 1);
    CHECK(rows <= (owns_cache ? k + 1 : 1));
  }
  for (std::size_t i = 0; i < fast.drafted[0].size(); ++i) {
    CHECK(fast.drafted[0][i] <= k);
    CHECK(fast.accepted[0][i] <= fast.drafted[0][i]);
  }
}

// Each policy on every prompt: speculating with the oracle's drafts gives
// the greedy text.
void check_exact_with_oracle(const std::vector<std::string>& policies, std::size_t tokens, std::size_t k) {
  for (const std::string& policy : policies)
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(policy);
      CAPTURE(i);
      const Run greedy = generate(prompts[i], policy, tokens);
      const Run checked = generate(prompts[i], policy, tokens, k, oracle_with_errors(prompts[i], greedy.tokens));
      check_speculative(greedy, checked, k, tokens, policy);
    }
}

}  // namespace

TEST_SUITE("speculative verification") {
  TEST_CASE("speculative greedy text is the greedy text, for full and mpcache, on three prompts") {
    constexpr std::size_t tokens = 12, k = 3;
    for (const std::string policy : {"full", "mpcache"}) {
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(policy);
        CAPTURE(i);
        const Run greedy = generate(prompts[i], policy, tokens);
        // Every acceptance count 0..K, then prompt lookup.
        const Run checked = generate(prompts[i], policy, tokens, k, oracle_with_errors(prompts[i], greedy.tokens));
        check_speculative(greedy, checked, k, tokens, policy);
        std::set<std::size_t> counts(checked.accepted[0].begin(), checked.accepted[0].end());
        for (std::size_t a = 0; a <= k; ++a) CHECK(counts.count(a) == 1);
        const Run looked_up = generate(prompts[i], policy, tokens, k, lookup_drafter());
        check_speculative(greedy, looked_up, k, tokens, policy);
        MESSAGE(policy << " prompt " << i << ": " << looked_up.accepted[0].size() << " decode steps with lookup, "
                       << checked.accepted[0].size() << " with the oracle, " << tokens - 1 << " one by one");
      }
    }
  }

  TEST_CASE("the other policies give the greedy text too, on three prompts") {
    check_exact_with_oracle({"mpcache-paper", "streaming_llm", "quest", "snapkv", "longcache", "arkvale", "arkvale-recall"},
                            /*tokens=*/8, /*k=*/2);
  }

  TEST_CASE("a public draft model (here the checkpoint itself, in float64) gives the greedy text, mostly accepted") {
    constexpr std::size_t tokens = 12, k = 3;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      const Run greedy = generate(prompts[i], "full", tokens);
      const Run drafted = generate(prompts[i], "full", tokens, k, model_drafter(testing::fixture_dir(), 256));
      check_speculative(greedy, drafted, k, tokens, "full");
      // Private greedy tokens are the float64 argmax: a draft model equal to
      // the target is wrong only where fixed point breaks a near-tie.
      MESSAGE("prompt " << i << ": " << drafted.accepted[0].size() << " decode steps for " << tokens - 1 << " tokens");
      CHECK(2 * drafted.accepted[0].size() <= tokens - 1);
    }
  }

  TEST_CASE("GPT-2's blocks (biases, LayerNorm, GeLU, learned positions) give the greedy text too") {
    const auto gpt2 = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tests/fixtures/model/gpt2-tiny";
    constexpr std::size_t tokens = 8, k = 3;  // the fixture has 64 positions
    const std::vector<std::uint32_t> prompt(prompts[1].begin(), prompts[1].begin() + 40);
    for (const std::string policy : {"full", "mpcache"}) {
      CAPTURE(policy);
      const Run greedy = generate(prompt, policy, tokens, 0, {}, gpt2);
      const Run checked = generate(prompt, policy, tokens, k, oracle_with_errors(prompt, greedy.tokens), gpt2);
      check_speculative(greedy, checked, k, tokens, policy);
    }
  }

  TEST_CASE("a step of K+1 rows costs the rounds of a step of one, plus the acceptance's") {
    // The first decode step at party 0, full cache, exact truncation (the
    // fixture: 2 layers). Rounds are exact (seeded, in process).
    const Run greedy = generate(prompts[0], "full", 4);
    const Run k1 = generate(prompts[0], "full", 4, 1, lookup_drafter());
    const Run k3 = generate(prompts[0], "full", 4, 3, lookup_drafter());
    const std::uint64_t one = greedy.rounds[0].at(1), two = k1.rounds[0].at(1), four = k3.rounds[0].at(1);
    MESSAGE("decode step rounds at party 0: 1 row " << one << ", 2 rows " << two << ", 4 rows " << four);
    // The rows share every layer's rounds. The acceptance adds an equality
    // on 8 bits, a prefix product over the K matches (0 rounds for K = 1,
    // 2 for K = 3) and one more opening than a step that opens one token.
    testing::check_pinned("model.speculate.step_rounds_1_2_4_rows", std::vector<std::uint64_t>{one, two, four});
  }

  TEST_CASE("policies that select by what they observed: exact on three prompts, rows taking turns per layer") {
    // H2O, TOVA and InfLLM evict by the attention they observed: at the
    // default budget (48) the 80-token prompts evict at every step, so a
    // row that selected without the rows before it would choose otherwise.
    check_exact_with_oracle({"h2o", "tova", "infllm"}, /*tokens=*/8, /*k=*/3);
    // The rows take turns in each layer's selection and attention only:
    // a 4-row step costs less than 4 steps of one row.
    const Run one = generate(prompts[0], "h2o", 4);
    const Run four = generate(prompts[0], "h2o", 4, 3, lookup_drafter());
    const std::uint64_t one_row = one.rounds[0].at(1), four_rows = four.rounds[0].at(1);
    MESSAGE("h2o decode step rounds at party 0: 1 row " << one_row << ", 4 rows " << four_rows);
    CHECK(four_rows < 4 * one_row);
    testing::check_pinned("model.speculate.h2o_step_rounds_1_4_rows", std::vector<std::uint64_t>{one_row, four_rows});
  }

  TEST_CASE("mpcache-shared-step: the later rows take the first row's pick, fewer rounds a step") {
    // Not exact by design: the text is reported, the rounds are checked.
    constexpr std::size_t tokens = 8, k = 3;
    std::vector<std::uint64_t> shared_second_steps;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      const Run greedy = generate(prompts[i], "mpcache", tokens);
      const Run per_row = generate(prompts[i], "mpcache", tokens, k, oracle_with_errors(prompts[i], greedy.tokens));
      const Run shared =
          generate(prompts[i], "mpcache-shared-step", tokens, k, oracle_with_errors(prompts[i], greedy.tokens));
      // Without speculation it is mpcache.
      CHECK(generate(prompts[i], "mpcache-shared-step", tokens).tokens == greedy.tokens);
      REQUIRE(shared.tokens.size() == tokens);
      std::size_t agree = 0;
      while (agree < tokens && shared.tokens[agree] == greedy.tokens[agree]) ++agree;
      MESSAGE("prompt " << i << ": shared picks agree with per-row picks on the first " << agree << " of " << tokens
                        << " tokens; second step rounds " << shared.rounds[0].at(2) << " against "
                        << per_row.rounds[0].at(2));
      // The first step after the prompt has no pick from a step before:
      // its rows rank as per-row mode does. From the second on they do not.
      CHECK(shared.rounds[0].at(1) == per_row.rounds[0].at(1));
      CHECK(shared.rounds[0].at(2) < per_row.rounds[0].at(2));
      shared_second_steps.push_back(shared.rounds[0].at(2));
    }
    testing::check_pinned("model.speculate.shared_step_second_step_rounds", shared_second_steps);
  }

  TEST_CASE("speculation refuses a policy that selects by what it observed but cannot adopt a layer") {
    // Full cache that claims to select from what it observed, without adopt_layer.
    struct Forgetful : kv::FullCache<Ref> {
      bool selects_from_observed() const noexcept { return true; }
    };
    const kv::AnyPolicy<Ref> forgetful{Forgetful{}};
    auto check = [](const kv::AnyPolicy<Ref>& policy) { check_speculative_policy<kv::AnyPolicy<Ref>, Ref>(policy); };
    CHECK(kv::OptionalMembers<Ref>::selects_from_observed(forgetful));
    CHECK_FALSE(kv::OptionalMembers<Ref>::adopts_layers(forgetful));
    CHECK_THROWS_WITH_AS(check(forgetful), doctest::Contains("cannot adopt a layer's state"), Error);
    const auto h2o = kv::make_policy<Ref>("h2o", 48);
    CHECK(kv::OptionalMembers<Ref>::adopts_layers(h2o));
    CHECK_NOTHROW(check(h2o));
    // Adopting across kinds of policy is an error, not a silent copy.
    auto tova = kv::make_policy<Ref>("tova", 48);
    tova.reset(1, 1);
    CHECK_THROWS_WITH_AS(tova.adopt_layer(h2o, 0), doctest::Contains("another kind of policy"), Error);
  }

  TEST_CASE("speculation refuses what it cannot run exactly, naming why") {
    auto error_of = [](const std::string& policy, std::size_t k, ProtocolBackend backend = ProtocolBackend::rss3) {
      GenerationJob job;
      job.model_dir = testing::fixture_dir();
      job.policy = policy;
      job.speculate = k;
      job.mode.backend = backend;
      job.prompt = prompts[0];
      Scheduler scheduler;
      InProcessNetwork network(scheduler, 3);
      try {
        (void)sync_wait(scheduler, generate_party(network.endpoint(0), std::move(job)));
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    CHECK(error_of("full", 17).find("speculate 17 tokens a step, outside 0..16") != std::string::npos);
    CHECK(error_of("full", 2, ProtocolBackend::add2).find("speculation runs under rss3, not add2") != std::string::npos);
  }

  TEST_CASE("prompt lookup continues the latest earlier occurrence of the longest suffix") {
    const Drafter lookup = lookup_drafter();
    const auto context = bytes_of("abcab");
    CHECK(lookup(context, 3) == bytes_of("cab"));
    // Nothing to continue: the last token, repeated.
    CHECK(lookup(bytes_of("xyz"), 2) == bytes_of("zz"));
    // The longest suffix wins over a more recent shorter one: "ab" -> 'x', "b" alone -> 'y'.
    CHECK(lookup(bytes_of("abxbyab"), 1) == bytes_of("x"));
  }

  TEST_CASE("an n-gram model drafts the most frequent continuation, backing off") {
    const NgramModel model(bytes_of("the cat sat. the cat ran. the dog sat."), 4);
    const Drafter draft = ngram_drafter(std::make_shared<const NgramModel>(model));
    CHECK(draft(bytes_of("and the c"), 3) == bytes_of("at "));
    CHECK(model.next(bytes_of("q")) == std::nullopt);
    CHECK_THROWS_AS(NgramModel(bytes_of("abc"), 7), Error);
  }
}
