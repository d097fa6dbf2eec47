// `mpcache demo`: the arithmetic demo (src/jobs/demo_job.hpp) with three parties in
// this process, printed. Include after `import mpcache;`.
#pragma once
#include "demo_job.hpp"  // src/jobs: DemoOptions, the computation and its check

namespace mpcache::tools {

// Three parties in this process; prints y, the error and the costs. Returns
// 0 when y matches float64 within the bound and only the client learned it.
int run_demo(const jobs::DemoOptions& options);

}  // namespace mpcache::tools
