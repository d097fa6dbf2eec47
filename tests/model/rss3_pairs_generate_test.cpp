// Private generation on rss3 with truncation pairs (`--truncation
// exact+offline`): pairs made between decode steps take a round off every
// exact product; the tokens stay the float64 argmax and the exact ones.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/fixture_generation.hpp"
#include "../support/float64_argmax.hpp"

using namespace mpcache;

TEST_SUITE("rss3 truncation pairs generation") {
  TEST_CASE("generate_party with truncation pairs: the exact tokens, the float64 argmax, fewer rounds from the first decoded step on") {
    constexpr std::size_t tokens = 5;
    constexpr std::uint64_t budget = std::uint64_t{64} << 20;
    for (const std::string name : {"full", "mpcache"}) {
      CAPTURE(name);
      const auto prompt = testing::fixture_prompt();
      std::array<std::vector<std::uint64_t>, 3> with_rounds, without_rounds;
      const auto with_pairs = testing::generate_results(prompt, ProtocolBackend::rss3, name, std::nullopt, tokens,
                                                        {}, Rss3Comparisons::circuit, budget, &with_rounds)[0]
                                  .tokens;
      const auto exact = testing::generate_results(prompt, ProtocolBackend::rss3, name, std::nullopt, tokens, {},
                                                   Rss3Comparisons::circuit, 0, &without_rounds)[0]
                             .tokens;
      REQUIRE(with_pairs.size() == tokens);
      CHECK(with_pairs == exact);
      testing::check_near_float64_argmax(name, prompt, with_pairs);
      // The prefill has no pairs (it costs the same); the pairs for the first
      // decode step come from the prefill's demand per prompt token, later
      // ones from the step before. From the first decode step on, every
      // party's step takes at least 10 rounds fewer.
      for (std::size_t id = 0; id < 3; ++id) {
        CAPTURE(id);
        REQUIRE(with_rounds[id].size() == tokens);
        REQUIRE(without_rounds[id].size() == tokens);
        CHECK(with_rounds[id][0] == without_rounds[id][0]);
        for (std::size_t step = 1; step < tokens; ++step) {
          CAPTURE(step);
          CHECK(with_rounds[id][step] + 10 < without_rounds[id][step]);
        }
      }
    }
  }
}
