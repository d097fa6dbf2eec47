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
      const auto dcf = testing::generate_results(prompt, GenerationProtocol::rss3, name, std::nullopt, tokens, {},
                                                 Rss3Comparisons::dcf)[0]
                           .tokens;
      const auto circuit = testing::generate_results(prompt, GenerationProtocol::rss3, name, std::nullopt, tokens)[0].tokens;
      REQUIRE(dcf.size() == tokens);
      CHECK(dcf == circuit);
      testing::check_near_float64_argmax(name, prompt, dcf);
    }
  }
}
