// See local_job.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <nlohmann/json.hpp>
import mpcache;
#include "local_job.hpp"

namespace mpcache::bench {

nlohmann::json run_local_job(const std::string& args) {
  const std::string cmd = std::string(MPCACHE_CLI) + " local " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw Error(ErrorCode::io, "cannot run " + cmd);
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  const int status = ::pclose(p);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (status != 0 || j.is_discarded() || !j.value("ok", false))
    throw Error(ErrorCode::network, "`" + cmd + "` failed: " + text);
  return j;
}

}  // namespace mpcache::bench
