// Generation that ends at a stop token (EOS), which only the client sees:
// after each step but the last the client tells the other parties, on its
// own stream, whether to go on; the word travels in the tick of its next
// input, so every party stops after the same step and no round is added.
// On the fixture model (bytes), in one process, under rss3 and add2.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;

namespace {
using testing::fixture_dir;
using testing::fixture_prompt;

constexpr std::size_t budget_tokens = 6;

// Critical-path rounds of each step, across the online parties (under add2
// the dealer's work is offline: parties 0 and 1, as `mpcache generate`).
std::vector<std::uint64_t> step_rounds(const std::array<std::vector<GenerationStep>, 3>& steps,
                                       ProtocolBackend protocol) {
  const std::size_t online = protocol == ProtocolBackend::add2 ? 2 : 3;
  std::vector<std::uint64_t> out;
  for (std::size_t k = 0; k < steps[0].size(); ++k) {
    CriticalPath path;
    for (std::size_t i = 0; i < online; ++i) path.add(steps[i].at(k).clock_before, steps[i].at(k).clock_after);
    out.push_back(path.rounds());
  }
  return out;
}

struct Run {
  std::array<GenerationResult, 3> results;
  std::array<std::vector<GenerationStep>, 3> steps;
};

// generate_party at every party; the client stops at `stop_tokens`.
Run generate(ProtocolBackend protocol, const std::vector<std::uint32_t>& stop_tokens,
             std::size_t tokens = budget_tokens) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  Run run;
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
    GenerationJob job;
    job.model_dir = fixture_dir();
    job.mode.backend = protocol;
    job.new_tokens = tokens;
    job.rss3 = {.exact_truncation = true, .insecure_seed = 5};
    job.add2 = {.exact_truncation = true, .insecure_seed = 5};
    if (id == 0) {
      job.prompt = fixture_prompt();
      job.stop_tokens = stop_tokens;
    }
    GenerationObserver observer;
    observer.step = [&run, id](const GenerationStep& s) { run.steps[id].push_back(s); };
    co_return co_await generate_party(network.endpoint(id), std::move(job), std::move(observer));
  });
  for (std::size_t i = 0; i < 3; ++i) run.results[i] = std::move(results[i]);
  return run;
}

// The same generation with the library's loop alone: generate() at every
// party with no stop signal (the client never tells the others anything),
// each step's clocks as generate_party reports them.
template <class Party, class Options>
std::array<std::vector<GenerationStep>, 3> steps_without_signal(const Options& options, std::size_t tokens) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<std::vector<GenerationStep>, 3> steps;
  const auto prompt = fixture_prompt();
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    Endpoint& endpoint = network.endpoint(id);
    auto state = co_await Party::setup(endpoint, options);
    auto p = state->session();
    using P = decltype(p);
    const ModelConfig config = ModelConfig::from_json_file(fixture_dir() / "config.json");
    const WeightSource source = id == 1 ? weights_from_file(fixture_dir() / "model.safetensors") : no_weights();
    auto weights = co_await load_decoder(p, config, source, 1);
    Decoder<P> decoder(weights, DecoderOptions{default_prefill_memory_budget, PrefillLogits::last});  // as generate's
    auto policy = kv::make_policy<P>("mpcache", 48);
    GenerationRequest request;
    request.client = 0;
    if (id == 0) request.prompt = prompt;
    request.prompt_length = prompt.size();
    request.new_tokens = tokens;
    GenerationObserver observer;
    observer.costs = [&endpoint] { return endpoint.costs(); };
    observer.step = [&steps, id](const GenerationStep& s) { steps[id].push_back(s); };
    (void)co_await mpcache::generate(p, decoder, policy, std::move(request), std::move(observer));
  });
  return steps;
}

std::array<std::vector<GenerationStep>, 3> steps_without_signal(ProtocolBackend protocol, std::size_t tokens) {
  if (protocol == ProtocolBackend::add2)
    return steps_without_signal<Add2Party>(Add2Options{.exact_truncation = true, .insecure_seed = 5}, tokens);
  return steps_without_signal<Rss3Party>(Rss3Options{.exact_truncation = true, .insecure_seed = 5}, tokens);
}

template <class T>
std::string joined(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

// The first k >= 1 (else 0) whose token did not come before it: stopping at
// it ends the generation after exactly k + 1 tokens.
std::size_t first_new_token(const std::vector<std::uint32_t>& tokens, std::size_t from) {
  for (std::size_t k = from; k + 1 < tokens.size(); ++k)
    if (std::find(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k), tokens[k]) ==
        tokens.begin() + static_cast<std::ptrdiff_t>(k))
      return k;
  return 0;
}
}  // namespace

TEST_SUITE("generation stops at EOS") {
  TEST_CASE("every party stops after the client's stop token; without one the budget runs out") {
    for (auto protocol : {ProtocolBackend::rss3, ProtocolBackend::add2}) {
      const std::string name = protocol_backend_name(protocol);
      CAPTURE(name);
      // No stop token (--ignore-eos): the whole budget, at every party.
      const Run full = generate(protocol, {});
      const auto& tokens = full.results[0].tokens;
      REQUIRE(tokens.size() == budget_tokens);
      for (const auto& r : full.results) {
        CHECK(r.generated == budget_tokens);
        CHECK(r.end == GenerationEnd::budget);
      }
      MESSAGE(name << " tokens without a stop token: " << joined(tokens));

      // Stop at the token chosen at step k: k + 1 tokens, the same ones.
      const std::size_t k = first_new_token(tokens, 2);
      CAPTURE(k);
      const Run stopped = generate(protocol, {tokens[k]});
      const std::vector<std::uint32_t> head(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k + 1));
      CHECK(stopped.results[0].tokens == head);
      for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK(stopped.results[i].generated == k + 1);
        CHECK(stopped.results[i].end == GenerationEnd::eos);
        // No party started another step, but add2's dealer, which deals one
        // step ahead of the client's word so as never to wait for it: its
        // step past the end is never used.
        const bool ahead = protocol == ProtocolBackend::add2 && i == add2_dealer;
        CHECK(stopped.steps[i].size() == k + 1 + (ahead ? 1 : 0));
        if (i > 0) CHECK(stopped.results[i].tokens.empty());
      }
      // The steps that ran cost the rounds they cost without the stop.
      const auto full_rounds = step_rounds(full.steps, protocol);
      const auto stopped_rounds = step_rounds(stopped.steps, protocol);
      CHECK(stopped_rounds == std::vector<std::uint64_t>(full_rounds.begin(), full_rounds.begin() + static_cast<std::ptrdiff_t>(k + 1)));

      // The stop token as the last one the budget allows: the client says
      // eos; the others, who hear nothing after the last step, say budget.
      const Run last = generate(protocol, {tokens[k]}, k + 1);
      CHECK(last.results[0].tokens == head);
      CHECK(last.results[0].end == GenerationEnd::eos);
      for (std::size_t i = 1; i < 3; ++i) CHECK(last.results[i].end == GenerationEnd::budget);
      for (const auto& r : last.results) CHECK(r.generated == k + 1);
    }
  }

  TEST_CASE("the client's word to go on adds no round: each step costs what it cost without it") {
    for (auto protocol : {ProtocolBackend::rss3, ProtocolBackend::add2}) {
      const std::string name = protocol_backend_name(protocol);
      CAPTURE(name);
      const auto with_signal = step_rounds(generate(protocol, {}).steps, protocol);
      const auto without = step_rounds(steps_without_signal(protocol, budget_tokens), protocol);
      MESSAGE(name << " rounds per step (prefill, then decode steps): " << joined(with_signal));
      CHECK(with_signal == without);
      // And what they cost before the client had a word to send (b72d4e9:
      // `mpcache generate --in-process --model tools/model/fixture --tokens 6`
      // with this prompt): a change here is a change of the generation's cost.
      // rss3's prefill is one round shorter since an exact truncation alone
      // takes one round; every step 20 to 26 shorter since exact truncation
      // lets exp take its polynomial, piecewise polynomials fold their sums'
      // truncation and a decode's softmax form e v before the reciprocal;
      // each 5 to 12 shorter again since rsqrt takes a degree-4 polynomial
      // there and a norm's sum of squares no truncation alone (rss3's
      // circuit pays about that back in its wider highest-bit search); 2
      // shorter since softmax's reciprocal runs on a fork of its own
      // (reciprocal_then), which moves which party leads its comparisons;
      // 22 to 28 shorter since rsqrt and the reciprocal take octave pieces
      // (ops/octaves.cppm: msb_bits + bit_dot after their comparisons).
      // The prefill 3 (rss3) and 8 (add2) shorter since its last layer runs
      // the last row's attention output and MLP alone, in one-row forms.
      // The prefill 4 shorter (both) since its attention runs in causal
      // blocks (ops::softmax_apply: the normalisation on the outputs; the
      // row max planned on all of them at once).
      // MPCache ranks ahead (the default): the first decode step ranks for
      // itself after the norm, 20 (rss3) and 20 (add2) rounds longer than
      // ranking early; every later step takes the pick the step before
      // made, 14 to 18 shorter.
      const bool under_add2 = protocol == ProtocolBackend::add2;
      testing::check_pinned(under_add2 ? "model.eos.add2.step_rounds" : "model.eos.rss3.step_rounds", with_signal);
    }
  }
}
