// Multi-process jobs over TCP: one party of a job (run_party), and three
// party processes on this host with their reports merged (run_local_job).
// A job is `demo` (demo_job.hpp) or benchmark cases (op_cases.hpp); each
// party times its sections between barriers and writes a JSON report.
//
// Shared by the `mpcache` CLI (`mpcache party`, `mpcache local`), the job
// runner `mpcache-party` (party_main.cpp) and mpcache-bench (--processes 3,
// preset net), so that neither the bench nor the CLI runs the other.
// Include after `import mpcache;`.
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "network_choice.hpp"

namespace CLI {
class App;
}

namespace mpcache::jobs {

// What --job accepts, for help texts (checked when the job starts).
extern const char* const job_names_help;

struct PartyJob {
  std::string config;              // cluster config (cluster_config.hpp)
  unsigned id = 0;                 // this party's index in it
  NetworkChoice network;
  std::string job = "demo";        // demo, micro, ops, paper-table2 or one case
  std::string report;              // JSON report file ("" = stdout)
  std::string fault;               // tests: "exit" or "silent" mid-protocol
  int repeat = 1;                  // runs per case (median reported)
  std::size_t threads = 1;         // this party's compute pool (1: none)
};

// --config, --id, --job, --report, --repeat, --fault and the network options
// (add_network_options) on `command`: `mpcache party` and `mpcache-party`.
void add_party_options(CLI::App& command, PartyJob& job);
// `job` as those flags: what a launcher appends to a party's command.
std::vector<std::string> party_args(const PartyJob& job);

// Runs one party; returns the process exit code. The report is written
// whatever happens; errors are also printed to stderr naming the peer.
int run_party(const PartyJob& job);

// The job runner's main (mpcache-party): the flags of add_party_options.
int party_main(int argc, char** argv);

struct LocalJob {
  NetworkChoice network;
  std::string job = "demo";
  int timeout_ms = 10000;   // set-up and peer silence deadline
  std::string fault;        // "PARTY:exit" or "PARTY:silent"
  int repeat = 1;
  bool stranger = false;    // tests: garbage + an idle connection at each listening port during set-up
  std::size_t threads = 1;  // each party's compute pool (1: none)
};

// --threads N on `command`: a party's compute pool (mpcache party, local, serve).
void add_threads_option(CLI::App& command, std::size_t& threads);

struct LocalJobResult {
  // {"job", "link", "link_emulated", "encrypted", "transport", "parties":
  // [each party's report + "exit_status"], "cases": [merged per case:
  // slowest party's latency_s, bytes_max_party, bytes_total, rounds on the
  // critical path, model_link_s with a link], "ok"}.
  nlohmann::json report;
  // SIGINT, SIGTERM or SIGHUP received while the parties ran (passed on to
  // them; `report` is then empty), 0 if none.
  int stopped_by = 0;
};

// Three party processes on loopback (free ports, fresh keys unless
// network.insecure, in a temporary folder removed afterwards). Party i runs
// `party_command` followed by party_args(): {exe, "party"} for the CLI,
// {mpcache-party} for the bench. The job, network and fault are checked
// (throwing an Error naming them) before any file is written or process
// started.
LocalJobResult run_local_job(const LocalJob& job, const std::vector<std::string>& party_command);

}  // namespace mpcache::jobs
