// The named policy mpcache-shared-layers (MPCache, layer 2 taking layer 1's
// pick) on our 4-layer Austen model: private generation under rss3 picks
// the float64 argmax of the same policy, teacher-forced; and the sharing is
// live: layer 2 attends other tokens than with its own pick, so the float64
// logits differ from mpcache's.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"

using namespace mpcache;

namespace {
const std::filesystem::path austen = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/austen-byte";
constexpr std::size_t budget = 64;  // the first cluster, 2 picked and the tail

// 176 bytes of Emma: 11 clusters of 16, so that layers pick 2 of 9 candidates.
std::vector<std::uint32_t> prompt() {
  const std::string text =
      "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to "
      "unite some of the best blessings of existence; and had lived nearly twenty-one years in the world";
  std::vector<std::uint32_t> tokens;
  for (unsigned char ch : text.substr(0, 176)) tokens.push_back(ch);
  return tokens;
}

std::vector<std::uint32_t> generate_rss3(const std::string& policy, std::size_t tokens) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
    GenerationJob job;
    job.model_dir = austen;
    job.mode.backend = ProtocolBackend::rss3;
    job.mode.truncation = TruncationMode::exact;
    job.policy = policy;
    job.budget = budget;
    job.new_tokens = tokens;
    job.rss3.insecure_seed = 5;
    if (id == 0) job.prompt = prompt();
    co_return co_await generate_party(network.endpoint(id), std::move(job), GenerationObserver{});
  });
  CHECK(results[1].tokens.empty());
  CHECK(results[2].tokens.empty());
  return results[0].tokens;
}

std::vector<std::vector<double>> float64_logits(const std::string& policy, const std::vector<std::uint32_t>& chosen) {
  const ModelConfig config = ModelConfig::from_json_file(austen / "config.json");
  Ref r;
  auto weights = testing::run(load_decoder(r, config, weights_from_file(austen / "model.safetensors"), 0));
  Decoder<Ref> decoder(weights);
  auto made = kv::make_policy<Ref>(policy, budget);
  return testing::run(teacher_forced_logits(r, decoder, made, prompt(), chosen));
}
}  // namespace

TEST_SUITE("generation policies") {
  TEST_CASE("mpcache-shared-layers generates the float64 argmax on the 4-layer Austen model, sharing live") {
    const auto chosen = generate_rss3("mpcache-shared-layers", 2);
    REQUIRE(chosen.size() == 2);
    const auto shared = float64_logits("mpcache-shared-layers", chosen);
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      CAPTURE(i);
      const double best = *std::max_element(shared[i].begin(), shared[i].end());
      CHECK(shared[i].at(chosen[i]) >= best - 0.05);
    }
    // Not mpcache in disguise: the decode steps' logits move with the pick.
    const auto own = float64_logits("mpcache", chosen);
    double differ = 0;
    for (std::size_t i = 1; i < chosen.size(); ++i)
      for (std::size_t v = 0; v < own[i].size(); ++v) differ = std::max(differ, std::abs(own[i][v] - shared[i][v]));
    CHECK(differ > 1e-6);
  }
}
