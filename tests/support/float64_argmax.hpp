// Test support: private tokens on the fixture model against the float64
// decoder. Include after the `import` lines, doctest, run_task.hpp and
// fixture_generation.hpp.
#pragma once

namespace mpcache::testing {

// Each of `chosen` (generated from `prompt` under `policy` with its default
// budget) within 0.05 of the float64 decoder's best logit at its step
// (teacher-forced).
inline void check_near_float64_argmax(const std::string& policy, const std::vector<std::uint32_t>& prompt,
                                      const std::vector<std::uint32_t>& chosen) {
  const ModelConfig config = ModelConfig::from_json_file(fixture_dir() / "config.json");
  Ref r;
  auto weights = run(load_decoder(r, config, weights_from_file(fixture_dir() / "model.safetensors"), 0));
  Decoder<Ref> decoder(weights);
  auto made = kv::make_policy<Ref>(policy, kv::default_budget(policy));
  const auto logits = run(teacher_forced_logits(r, decoder, made, prompt, chosen));
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    CAPTURE(i);
    const double best = *std::max_element(logits[i].begin(), logits[i].end());
    CHECK(logits[i].at(chosen[i]) >= best - 0.05);
  }
}

}  // namespace mpcache::testing
