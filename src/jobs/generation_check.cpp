// See generation_check.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
import mpcache.text;
import mpcache;
#include "generation_check.hpp"

namespace mpcache::jobs {

using nlohmann::json;

// The Ref logits after the prompt and the chosen tokens (teacher-forced,
// same policy); each chosen token should be their argmax (exact) or within
// 0.05 of it (a near-tie may flip under fixed point).
json float64_check(const GenerateOptions& o, const std::vector<std::uint32_t>& prompt,
                   const std::vector<std::uint32_t>& chosen) {
  const ModelConfig c = ModelConfig::from_json_file(o.model_dir + "/config.json");
  Scheduler scheduler;
  Ref p;
  const auto unused = o.allow_unused_weights ? UnusedTensors::allow : UnusedTensors::reject;
  auto weights = sync_wait(scheduler, load_decoder(p, c, weights_from_file(o.model_dir + "/model.safetensors", unused)));
  Decoder<Ref> decoder(weights);
  auto policy = kv::make_policy<Ref>(o.policy, o.budget);
  const auto steps = sync_wait(scheduler, teacher_forced_logits(p, decoder, policy, prompt, chosen));
  std::size_t exact = 0, near = 0;
  double worst_gap = 0;
  std::vector<std::uint32_t> argmaxes;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const auto& last = steps[i];
    const auto best = static_cast<std::uint32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    argmaxes.push_back(best);
    const double gap = last[best] - last[chosen[i]];
    worst_gap = std::max(worst_gap, gap);
    exact += chosen[i] == best ? 1 : 0;
    near += gap <= 0.05 ? 1 : 0;
  }
  return {{"exact", exact}, {"near", near}, {"tokens", chosen.size()}, {"worst_gap", worst_gap},
          {"float64_argmax", argmaxes}, {"ok", near == chosen.size()}};
}

}  // namespace mpcache::jobs
