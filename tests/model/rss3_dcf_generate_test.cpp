// Private generation on rss3 with comparisons from DCF keys (the party
// outside each pair deals): the fixture model picks the float64 argmax,
// the tokens the circuit comparisons pick.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/fixture_generation.hpp"
#include "../support/float64_argmax.hpp"

using namespace mpcache;

TEST_SUITE("rss3 dcf generation") {
  TEST_CASE("generate_party on rss3 with dcf comparisons picks the float64 argmax, as the circuit does") {
    constexpr std::size_t tokens = 6;
    for (const std::string name : {"full", "mpcache"}) {
      CAPTURE(name);
      const auto prompt = testing::fixture_prompt();
      const auto dcf = testing::generate_results(prompt, ProtocolBackend::rss3, name, std::nullopt, tokens, {},
                                                 Rss3Comparisons::dcf)[0]
                           .tokens;
      const auto circuit = testing::generate_results(prompt, ProtocolBackend::rss3, name, std::nullopt, tokens)[0].tokens;
      REQUIRE(dcf.size() == tokens);
      CHECK(dcf == circuit);
      testing::check_near_float64_argmax(name, prompt, dcf);
    }
  }

  // The offline phase through the public API: generate_party fills the
  // dealers' stores between decode steps (Rss3::refill_comparisons), so a
  // decode step's comparisons take their keys from the store instead of a
  // dealer's message: the same tokens in fewer rounds per step. The
  // prefill, whose keys no store holds, compares on the circuit
  // (Rss3::compare_on_circuit), with keys dealt inline as with a store:
  // its rounds are the circuit's to the round.
  TEST_CASE("generate_party with an offline store of DCF keys: the same tokens, fewer rounds per decode step") {
    constexpr std::size_t tokens = 4;
    const auto prompt = testing::fixture_prompt();
    std::array<std::vector<std::uint64_t>, 3> inline_rounds, store_rounds, circuit_rounds;
    (void)testing::generate_results(prompt, ProtocolBackend::rss3, "mpcache", std::nullopt, 1, {},
                                    Rss3Comparisons::circuit, 0, &circuit_rounds);
    const auto dealt_inline = testing::generate_results(prompt, ProtocolBackend::rss3, "mpcache", std::nullopt,
                                                        tokens, {}, Rss3Comparisons::dcf, 0, &inline_rounds)[0];
    const auto from_store = testing::generate_results(prompt, ProtocolBackend::rss3, "mpcache", std::nullopt,
                                                      tokens, {}, Rss3Comparisons::dcf, 0, &store_rounds,
                                                      std::uint64_t{256} << 20)[0];
    REQUIRE(from_store.tokens.size() == tokens);
    CHECK(from_store.tokens == dealt_inline.tokens);
    testing::check_near_float64_argmax("mpcache", prompt, from_store.tokens);
    REQUIRE(store_rounds[0].size() == tokens);
    REQUIRE(circuit_rounds[0].size() == 1);
    CHECK(store_rounds[0][0] == circuit_rounds[0][0]);  // the prefill and its token choice
    CHECK(inline_rounds[0][0] == circuit_rounds[0][0]);
    for (std::size_t step = 1; step < tokens; ++step) {
      CAPTURE(step);
      CHECK(store_rounds[0][step] < inline_rounds[0][step]);
    }
    MESSAGE("rounds of the prefill: circuit " << circuit_rounds[0][0] << ", keys dealt inline " << inline_rounds[0][0]
                                              << "; of decode step 2: keys dealt inline " << inline_rounds[0][2]
                                              << ", from the store " << store_rounds[0][2]);
  }
}
