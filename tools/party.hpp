// Multi-process jobs: `mpcache party` runs one party over TCP, `mpcache
// local` starts three party processes on loopback and collects their
// reports, `mpcache keygen` writes Ed25519 key files.
#pragma once
#include "network_choice.hpp"

namespace mpcache::tools {

struct PartyOptions {
  std::string config;
  unsigned id = 0;
  NetworkChoice network;
  std::string job = "demo";        // demo, micro, ops, paper-table2 or one case
  std::string report;              // JSON report file ("" = stdout)
  std::string fault;               // tests: "exit" or "silent" mid-protocol
  int repeat = 1;
};
// Returns the process exit code; errors are printed naming the peer.
int run_party(const PartyOptions& options);

struct LocalOptions {
  NetworkChoice network;
  std::string job = "demo";
  int timeout_ms = 10000;   // set-up and peer silence deadline
  std::string fault;        // "PARTY:exit" or "PARTY:silent"
  int repeat = 1;
  bool stranger = false;    // tests: garbage + an idle connection at each listening port during set-up
};

// `self` is this executable (re-run as `party` three times).
int run_local(const LocalOptions& options, const std::string& self);

struct KeygenOptions {
  std::string out_dir = ".";  // created if missing (its parent must exist)
  int parties = 3;
  bool force = false;         // replace existing key files
};
// Writes pN.key (mode 0600, created exclusively, links not followed) and pN.pub.
int run_keygen(const KeygenOptions& options);

}  // namespace mpcache::tools
