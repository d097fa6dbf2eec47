// Private generation accepts every policy of mpcache.kv by name: on the
// fixture model, each picks a byte under rss3 whose float64 logit (same
// policy, teacher-forced) is within 0.05 of the float64 maximum; an unknown
// name is refused with the accepted names.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/fixture_generation.hpp"

using namespace mpcache;

namespace {
using testing::fixture_prompt;
const std::filesystem::path fixture = testing::fixture_dir();
constexpr std::size_t budget = 64;  // above InfLLM's smallest with its defaults (51) and MPCache's (48); the prompt has 78 bytes
}  // namespace

TEST_SUITE("generation policies") {
  TEST_CASE("generate_party runs every policy by name and picks the float64 argmax") {
    const ModelConfig config = ModelConfig::from_json_file(fixture / "config.json");
    Ref r;
    auto weights = testing::run(load_decoder(r, config, weights_from_file(fixture / "model.safetensors"), 0));
    for (const auto& name : kv::policy_names()) {
      CAPTURE(name);
      const auto chosen = testing::generate_on_fixture(GenerationProtocol::rss3, name, budget, 2);
      REQUIRE(chosen.size() == 2);
      Decoder<Ref> decoder(weights);
      auto policy = kv::make_policy<Ref>(name, budget);
      const auto logits = testing::run(teacher_forced_logits(r, decoder, policy, fixture_prompt(), chosen));
      for (std::size_t i = 0; i < chosen.size(); ++i) {
        CAPTURE(i);
        const double best = *std::max_element(logits[i].begin(), logits[i].end());
        CHECK(logits[i].at(chosen[i]) >= best - 0.05);
      }
    }
  }

  TEST_CASE("an unknown policy name is refused, listing the accepted ones") {
    try {
      (void)kv::make_policy<Ref>("h3o", budget);
      FAIL("h3o was accepted");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("unknown policy 'h3o'") != std::string::npos);
      for (const auto& name : kv::policy_names()) CHECK(what.find(name) != std::string::npos);
    }
  }
}
