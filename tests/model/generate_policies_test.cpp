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
constexpr std::size_t budget = 64;  // above InfLLM's smallest with its defaults (51) and MPCache's (48); the prompt has 77 bytes
}  // namespace

TEST_SUITE("generation policies") {
  TEST_CASE("generate_party runs every policy by name and picks the float64 argmax") {
    const ModelConfig config = ModelConfig::from_json_file(fixture / "config.json");
    Ref r;
    auto weights = testing::run(load_decoder(r, config, weights_from_file(fixture / "model.safetensors"), 0));
    for (const auto& name : kv::policy_names()) {
      CAPTURE(name);
      const auto chosen = testing::generate_on_fixture(ProtocolBackend::rss3, name, budget, 2);
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

  TEST_CASE("ArkVale with recall generates what ArkVale does, its pages in each party's file, not in memory") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    const auto resident = testing::generate_results_on_fixture(ProtocolBackend::rss3, "arkvale", budget, 3);
    const auto recall = testing::generate_results_on_fixture(ProtocolBackend::rss3, "arkvale-recall", budget, 3);
    CHECK(recall[0].tokens == resident[0].tokens);
    // After the prompt (77) and 2 decoded tokens: 79 tokens, 4 complete
    // pages of 16 (the newest token's page is the tail), 3 stored (the first
    // is the sink); per layer and KV head, a page is 16 tokens of [key |
    // value | position], 2 words a value (rss3).
    const std::size_t heads = c.num_layers * c.num_kv_heads, word_pairs = 2 * sizeof(Ring);
    const std::size_t page_bytes = 16 * (2 * c.head_dim + 1) * word_pairs;
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(resident[i].kv_decoder_bytes == heads * 79 * 2 * c.head_dim * word_pairs);  // every token
      CHECK(recall[i].kv_decoder_bytes == heads * 2 * c.head_dim * word_pairs);         // the newest only
      CHECK(recall[i].kv_backing_bytes == heads * 3 * page_bytes);
      CHECK(resident[i].kv_backing_bytes == 0);
      REQUIRE(recall[i].kv_policy_bytes.has_value());
      REQUIRE(resident[i].kv_policy_bytes.has_value());
      // The same but for the stored pages (and the file tier's one-word layout prototype).
      CHECK(*recall[i].kv_policy_bytes + heads * 3 * page_bytes == *resident[i].kv_policy_bytes + heads * word_pairs);
    }
    // Policies that do not count what they hold say so.
    CHECK_FALSE(testing::generate_results_on_fixture(ProtocolBackend::rss3, "streaming_llm", budget, 2)[0]
                    .kv_policy_bytes.has_value());
  }

  TEST_CASE("MPCache counts the bytes it holds: every kept token, and their summaries; the decoder the newest") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    const auto results = testing::generate_results_on_fixture(ProtocolBackend::rss3, "mpcache", budget, 3);
    // 79 tokens (the prompt and 2 decoded), every one kept (no static
    // eviction by default); per layer and KV head, 2 words a value (rss3).
    const std::size_t heads = c.num_layers * c.num_kv_heads, word_pairs = 2 * sizeof(Ring);
    const std::size_t every_token = heads * 79 * 2 * c.head_dim * word_pairs;  // keys and values
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      REQUIRE(results[i].kv_policy_bytes.has_value());
      const std::size_t decoder = results[i].kv_decoder_bytes, policy = *results[i].kv_policy_bytes;
      // MPCache keeps its own cache (owns_cache): the decoder, the newest token only.
      CHECK(decoder == heads * 2 * c.head_dim * word_pairs);
      // Its cluster lists: the keys, values and positions of all 79 ...
      CHECK(policy >= heads * 79 * (2 * c.head_dim + 1) * word_pairs);
      // ... and summaries: per cluster of 16, a max, a min and their mix.
      CHECK(policy < 2 * every_token);
    }
  }

  TEST_CASE("every policy runs without a budget given: the default is 48, or the policy's minimum (InfLLM's 51)") {
    for (const auto& name : kv::policy_names()) {
      CAPTURE(name);
      CHECK(testing::generate_on_fixture(ProtocolBackend::rss3, name, std::nullopt, 1).size() == 1);
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
