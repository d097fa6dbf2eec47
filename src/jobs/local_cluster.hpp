// Three party processes on this host: a temporary folder with free loopback
// ports, fresh keys and a cluster.json (LocalCluster), and the spawning and
// waiting for the party processes (run_party_processes). Used by
// run_local_job (`mpcache local`, mpcache-bench --processes 3) and
// `mpcache generate`.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace mpcache::jobs {

// Owns a temporary folder (removed by the destructor, on every exit path)
// holding cluster.json and, unless insecure, pN.key / pN.pub.
class LocalCluster {
 public:
  LocalCluster(bool insecure, int timeout_ms, int parties = 3);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::string& dir() const noexcept { return dir_; }
  std::string config_path() const { return dir_ + "/cluster.json"; }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

// "PARTY:KIND" (e.g. "1:exit") -> {party, kind}; {-1, ""} for "". Throws
// naming the option when malformed or when KIND is not in `kinds`.
std::pair<int, std::string> parse_fault(const std::string& fault, const std::vector<std::string>& kinds,
                                        int parties = 3);

struct PartyProcess {
  std::vector<std::string> args;  // argv, args[0] = the executable
  bool quiet = false;             // stdout to /dev/null (stderr kept)
};

struct PartyExit {
  int status = -1;           // exit code, or 128 + signal
  bool ok = false;           // exited with 0
};

// Starts the processes and waits for all of them. Every party ends by itself
// within the deadlines; after `limit_ms` whatever is left is killed. Once all
// but `fault_party` have ended, it is killed (e.g. a silent party).
// SIGINT, SIGTERM or SIGHUP while waiting is passed on to the parties, which
// cancel their work together (StopOnSignal); any still running after
// `grace_ms` are killed. `*stopped_by` gets that signal (0 if none).
// `after_start(i)`, if given, runs once process i is started, before the
// next one is (tests use it to play a stranger to a listening party).
std::vector<PartyExit> run_party_processes(const std::vector<PartyProcess>& processes, int fault_party,
                                           int limit_ms, bool* killed_late = nullptr, int* stopped_by = nullptr,
                                           int grace_ms = 10000,
                                           const std::function<void(std::size_t)>& after_start = {});

}  // namespace mpcache::jobs
