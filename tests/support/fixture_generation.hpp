// Test support: private generation on the committed fixture model (LLaMA, 2
// layers, hidden 16, bytes), the three parties in this process. Include
// after the `import` lines and doctest; the test target defines
// MPCACHE_SOURCE_DIR.
#pragma once

namespace mpcache::testing {

inline std::filesystem::path fixture_dir() {
  return std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";
}

// 77 bytes of Emma.
inline std::vector<std::uint32_t> fixture_prompt() {
  std::vector<std::uint32_t> tokens;
  for (unsigned char ch : std::string("Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy"))
    tokens.push_back(ch);
  return tokens;
}

// generate_party at every party on the fixture model (exact truncation,
// seed 5) for `prompt`: every party's result; the other two parties must
// learn no token. No budget: the policy's default. `stops`: the client's.
// `comparisons`, `truncation_pairs_budget`: rss3's (add2 always compares
// on its circuit here). `step_rounds`: if given, each party's rounds per step.
inline std::array<GenerationResult, 3> generate_results(const std::vector<std::uint32_t>& prompt,
                                                        ProtocolBackend protocol, const std::string& policy,
                                                        std::optional<std::size_t> budget, std::size_t tokens,
                                                        const std::vector<std::uint32_t>& stops = {},
                                                        Rss3Comparisons comparisons = Rss3Comparisons::circuit,
                                                        std::uint64_t truncation_pairs_budget = 0,
                                                        std::array<std::vector<std::uint64_t>, 3>* step_rounds = nullptr,
                                                        std::uint64_t offline_budget = 0) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
    GenerationJob job;
    job.model_dir = fixture_dir();
    job.mode.backend = protocol;
    job.mode.truncation = truncation_pairs_budget > 0 ? TruncationMode::exact_offline : TruncationMode::exact;
    job.mode.truncation_pairs_budget = truncation_pairs_budget;
    job.mode.comparisons = comparisons == Rss3Comparisons::circuit ? ComparisonMode::circuit
                           : offline_budget > 0                    ? ComparisonMode::dcf_offline
                                                                   : ComparisonMode::dcf;
    job.mode.comparison_store_budget = offline_budget;
    job.policy = policy;
    job.budget = budget;
    job.new_tokens = tokens;
    job.rss3.insecure_seed = 5;
    job.add2.insecure_seed = 5;
    if (id == 0) {
      job.prompt = prompt;
      job.stop_tokens = stops;
    }
    GenerationObserver observer;
    if (step_rounds)
      observer.step = [&, id](const GenerationStep& step) { (*step_rounds)[id].push_back(step.costs.rounds); };
    co_return co_await generate_party(network.endpoint(id), std::move(job), std::move(observer));
  });
  CHECK(results[1].tokens.empty());  // the model owner learns no token
  CHECK(results[2].tokens.empty());  // nor does the third party (the dealer under add2)
  return {results[0], results[1], results[2]};
}

// The same for the fixture prompt.
inline std::array<GenerationResult, 3> generate_results_on_fixture(ProtocolBackend protocol,
                                                                   const std::string& policy,
                                                                   std::optional<std::size_t> budget,
                                                                   std::size_t tokens) {
  return generate_results(fixture_prompt(), protocol, policy, budget, tokens);
}

// The client's tokens of generate_results_on_fixture.
inline std::vector<std::uint32_t> generate_on_fixture(ProtocolBackend protocol, const std::string& policy,
                                                      std::optional<std::size_t> budget, std::size_t tokens) {
  return generate_results_on_fixture(protocol, policy, budget, tokens)[0].tokens;
}

}  // namespace mpcache::testing
