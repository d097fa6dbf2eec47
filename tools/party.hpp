// Multi-process jobs: `mpcache party` runs one party over TCP, `mpcache
// local` starts three party processes on loopback and collects their
// reports, `mpcache keygen` writes Ed25519 key files.
#pragma once

namespace mpcache::tools {

struct PartyOptions {
  std::string config;
  unsigned id = 0;
  std::string transport = "auto";  // auto | uring | asio
  std::string link = "none";       // none | lan | wan | RTT_MS:MBYTES_PER_S
  bool insecure = false;
  std::string job = "demo";        // demo, micro, ops, paper-table2 or one case
  std::string report;              // JSON report file ("" = stdout)
  std::string fault;               // tests: "exit" or "silent" mid-protocol
  int repeat = 1;
  int spin_us = static_cast<int>(default_spin.count());  // TcpOptions::spin (more: low-latency mode)
};
// Returns the process exit code; errors are printed naming the peer.
int run_party(const PartyOptions& options);

struct LocalOptions {
  std::string transport = "auto";
  std::string link = "none";
  bool insecure = false;
  std::string job = "demo";
  int timeout_ms = 10000;   // set-up and peer silence deadline
  std::string fault;        // "PARTY:exit" or "PARTY:silent"
  int repeat = 1;
  bool stranger = false;    // tests: garbage + an idle connection at each listening port during set-up
  int spin_us = static_cast<int>(default_spin.count());  // TcpOptions::spin (more: low-latency mode)
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
