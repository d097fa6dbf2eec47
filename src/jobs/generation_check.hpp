// `mpcache generate --check`: the float64 reference check, a debugging aid
// for a launcher that sees both the prompt and the weights (a real cluster
// cannot check). Decodes with Ref (mpcache-reference). Include after
// `import mpcache;`.
#pragma once
#include <cstdint>
#include <vector>
#include <nlohmann/json.hpp>
#include "generate_job.hpp"

namespace mpcache::jobs {

// {"exact", "near", "tokens", "worst_gap", "float64_argmax", "ok"}: how many
// of the chosen tokens are the float64 argmax, and within 0.05 of it.
nlohmann::json float64_check(const GenerateOptions& o, const std::vector<std::uint32_t>& prompt,
                             const std::vector<std::uint32_t>& chosen);

}  // namespace mpcache::jobs
