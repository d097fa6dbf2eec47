// `mpcache keygen`: Ed25519 key files for the parties of a cluster, or for
// one client of a service. Include after `import mpcache;`.
#pragma once
#include <string>

namespace mpcache::tools {

struct KeygenOptions {
  std::string out_dir = ".";  // created if missing (its parent must exist)
  int parties = 3;
  bool force = false;         // replace existing key files
  std::string client;         // non-empty: one client key pair NAME.key / NAME.pub instead
};
// Writes pN.key (mode 0600, created exclusively, links not followed) and pN.pub.
int run_keygen(const KeygenOptions& options);

}  // namespace mpcache::tools
