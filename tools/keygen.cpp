// `mpcache keygen` (see keygen.hpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <cstdio>
#include <sys/stat.h>
import mpcache;
#include "cluster_config.hpp"
#include "keygen.hpp"

namespace mpcache::tools {

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
