// Multi-process commands: `mpcache party` runs one party over TCP
// (jobs::run_party), `mpcache local` starts three party processes on
// loopback (jobs::run_local_job) and prints their merged report, `mpcache
// keygen` writes Ed25519 key files. The jobs themselves live in src/jobs
// (mpcache-jobs), which mpcache-bench links too. Include after
// `import mpcache;`.
#pragma once
#include <string>
#include "party_job.hpp"

namespace mpcache::tools {

// `self` is this executable (re-run as `self party ...` three times).
// Prints the report as one JSON line; returns the exit code.
int run_local(const jobs::LocalJob& options, const std::string& self);

struct KeygenOptions {
  std::string out_dir = ".";  // created if missing (its parent must exist)
  int parties = 3;
  bool force = false;         // replace existing key files
  std::string client;         // non-empty: one client key pair NAME.key / NAME.pub instead
};
// Writes pN.key (mode 0600, created exclusively, links not followed) and pN.pub.
int run_keygen(const KeygenOptions& options);

}  // namespace mpcache::tools
