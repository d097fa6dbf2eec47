// `mpcache local` and `mpcache keygen` (see party.hpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <sys/stat.h>
#include <nlohmann/json.hpp>
import mpcache;
#include "cluster_config.hpp"
#include "party.hpp"

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

int run_keygen(const KeygenOptions& o) {
  // Create the folder itself if needed, never its parents: a typo in a path
  // must not silently grow a tree somewhere.
  const std::filesystem::path dir(o.out_dir.empty() ? "." : o.out_dir);
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    const auto parent = dir.has_parent_path() ? dir.parent_path() : std::filesystem::path(".");
    if (!std::filesystem::is_directory(parent, ec))
      throw Error(ErrorCode::io, "keygen: cannot create '" + dir.string() + "': its parent folder '" +
                                     parent.string() + "' does not exist (create it first)");
    if (::mkdir(dir.c_str(), 0700) != 0)
      throw Error(ErrorCode::io, "keygen: cannot create '" + dir.string() + "': " + std::strerror(errno));
    std::printf("created folder %s (mode 0700)\n", dir.c_str());
  } else if (!std::filesystem::is_directory(dir, ec)) {
    throw Error(ErrorCode::io, "keygen: '" + dir.string() + "' exists and is not a folder");
  }
  if (!o.client.empty() && (o.client.find('/') != std::string::npos || o.client.starts_with(".")))
    throw Error(ErrorCode::invalid_argument, "keygen: client name '" + o.client + "' must be a plain file name");
  const int pairs = o.client.empty() ? o.parties : 1;
  for (int i = 0; i < pairs; ++i) {
    auto [secret, pub] = generate_party_key();
    const std::string base = (dir / (o.client.empty() ? "p" + std::to_string(i) : o.client)).string();
    jobs::write_key_file(base + ".key", secret, 0600, o.force);
    jobs::write_key_file(base + ".pub", pub, 0644, o.force);
    std::printf("%s.key %s.pub\n", base.c_str(), base.c_str());
  }
  return 0;
}

}  // namespace mpcache::tools
