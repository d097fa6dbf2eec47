// `mpcache generate`: private greedy generation with a KV-cache policy under
// rss3 or add2 (--protocol). Three modes, the runs of mpcache-jobs
// (src/jobs/generate_job.hpp says what each does):
//   * default: this launcher starts three `generate --config --id` processes
//     on loopback, streams the client's output and merges the parties' reports;
//   * --config FILE --id N: one party of a real cluster;
//   * --in-process: all three parties in this process (debugging).
// Include after `import mpcache;` and `import mpcache.text;`.
#pragma once
#include <string>
#include "generate_job.hpp"  // src/jobs

namespace mpcache::tools {

using jobs::GenerateOptions;

// `self` is this executable (re-run as the parties by the launcher).
int run_generate(const GenerateOptions& options, const std::string& self);

}  // namespace mpcache::tools
