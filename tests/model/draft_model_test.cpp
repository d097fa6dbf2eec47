// The public draft model (:draft_model, --draft model:DIR): its drafts are
// the float64 greedy tokens of its checkpoint; feeding the context a step at
// a time drafts what a fresh prefill of the whole context would; a context
// it cannot read (a token outside its vocabulary) drafts the filler; and a
// draft token outside the target's vocabulary ends the drafting.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"

using namespace mpcache;

namespace {

// The float64 greedy continuation of `context` by the fixture, `count` tokens.
std::vector<std::uint32_t> float64_greedy(const std::vector<std::uint32_t>& context, std::size_t count) {
  const ModelConfig c = ModelConfig::from_json_file(testing::fixture_dir() / "config.json");
  Scheduler scheduler;
  Ref p;
  const auto weights = sync_wait(scheduler, load_decoder(p, c, weights_from_file(testing::fixture_dir() / "model.safetensors")));
  Decoder<Ref> decoder(weights);
  auto policy = kv::make_policy<Ref>("full", 0);
  std::vector<std::uint32_t> out;
  auto logits = sync_wait(scheduler, decoder.prefill(p, policy, 0, context, context.size()));
  while (out.size() < count) {
    const RealTensor r = p.to_real(logits);
    const std::size_t rows = r.shape()[0], v = r.shape()[1];
    const double* last = r.data() + (rows - 1) * v;
    out.push_back(static_cast<std::uint32_t>(std::max_element(last, last + v) - last));
    if (out.size() < count) logits = sync_wait(scheduler, decoder.decode(p, policy, 0, out.back()));
  }
  return out;
}

}  // namespace

TEST_SUITE("public draft model") {
  TEST_CASE("drafts the float64 greedy tokens, fed a step at a time as from scratch") {
    const auto prompt = testing::fixture_prompt();
    const Drafter fed = model_drafter(testing::fixture_dir(), 256);
    const auto first = fed(prompt, 4);
    CHECK(first == float64_greedy(prompt, 4));
    // The next call's context: two drafts accepted and a correction.
    auto context = prompt;
    context.insert(context.end(), first.begin(), first.begin() + 2);
    context.push_back((first[2] + 1) % 256);
    const auto second = fed(context, 3);
    CHECK(second == float64_greedy(context, 3));
    CHECK(second == model_drafter(testing::fixture_dir(), 256)(context, 3));
    // A context that does not extend the last one (another session) starts again.
    CHECK(fed(prompt, 4) == first);
  }

  TEST_CASE("a context or a draft outside a vocabulary drafts the filler") {
    const auto prompt = testing::fixture_prompt();
    auto outside = prompt;
    outside.push_back(300);  // the fixture's vocabulary is 256 bytes
    CHECK(model_drafter(testing::fixture_dir(), 256)(outside, 3) == std::vector<std::uint32_t>(3, 300));
    // A target with a smaller vocabulary than a draft token: no draft from there on.
    const auto greedy = float64_greedy(prompt, 1);
    const Drafter narrow = model_drafter(testing::fixture_dir(), greedy[0]);
    CHECK(narrow(prompt, 2) == std::vector<std::uint32_t>(2, prompt.back()));
  }

  TEST_CASE("a missing model folder is an error naming it") {
    CHECK_THROWS_WITH_AS(model_drafter("/nonexistent/draft", 256), doctest::Contains("/nonexistent/draft"), Error);
  }
}
