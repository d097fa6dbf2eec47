// Private generation on rss3 with comparisons from DCF keys (the party
// outside each pair deals): the fixture model picks the float64 argmax,
// the tokens the circuit comparisons pick.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/fixture_generation.hpp"

using namespace mpcache;

TEST_SUITE("rss3 dcf generation") {
  TEST_CASE("generate_party on rss3 with dcf comparisons picks the float64 argmax, as the circuit does") {
    const std::filesystem::path fixture = testing::fixture_dir();
    const ModelConfig config = ModelConfig::from_json_file(fixture / "config.json");
    Ref r;
    auto weights = testing::run(load_decoder(r, config, weights_from_file(fixture / "model.safetensors"), 0));
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
      Decoder<Ref> decoder(weights);
      auto policy = kv::make_policy<Ref>(name, kv::default_budget(name));
      const auto logits = testing::run(teacher_forced_logits(r, decoder, policy, prompt, dcf));
      for (std::size_t i = 0; i < tokens; ++i) {
        CAPTURE(i);
        const double best = *std::max_element(logits[i].begin(), logits[i].end());
        CHECK(logits[i].at(dcf[i]) >= best - 0.05);
      }
    }
  }
}
