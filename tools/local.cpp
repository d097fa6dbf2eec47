// `mpcache local` (see local.hpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
import mpcache;
#include "local.hpp"

namespace mpcache::tools {

int run_local(const jobs::LocalJob& o, const std::string& self) {
  const jobs::LocalJobResult result = jobs::run_local_job(o, {self, "party"});
  if (result.stopped_by != 0) {
    std::fprintf(stderr, "mpcache local: stopped by signal %d; it was passed on to the parties\n", result.stopped_by);
    return 128 + result.stopped_by;
  }
  const nlohmann::json& summary = result.report;
  std::cout << summary.dump() << "\n";
  for (const auto& r : summary["parties"])
    if (!r.value("ok", false))
      std::fprintf(stderr, "mpcache local: party %d failed: %s\n", r.value("party", -1),
                   r.value("error", std::string("exit status ") + std::to_string(r.value("exit_status", -1))).c_str());
  return summary.value("ok", false) ? 0 : 1;
}

}  // namespace mpcache::tools
