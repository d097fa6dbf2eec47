// `mpcache local`: three party processes of a job on loopback
// (jobs::run_local_job), their merged report printed. `mpcache party`, one
// of them, is jobs::run_party. The jobs themselves live in src/jobs
// (mpcache-jobs), which mpcache-bench links too. Include after
// `import mpcache;`.
#pragma once
#include <string>
#include "party_job.hpp"

namespace mpcache::tools {

// `self` is this executable (re-run as `self party ...` three times).
// Prints the report as one JSON line; returns the exit code.
int run_local(const jobs::LocalJob& options, const std::string& self);

}  // namespace mpcache::tools
