// A service's processes (mpcache.serve): one server (`mpcache serve`, and
// `mpcache-party serve` for the bench) and one client request over TCP
// (`mpcache client`, `mpcache-party client`), plus a process started in the
// background for launchers that run servers and clients side by side (the
// bench's preset serve). Include after `import mpcache;`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>
#include "network_choice.hpp"
#include "protocol_mode_flags.hpp"

namespace CLI {
class App;
}

namespace mpcache::jobs {

struct ServeJob {
  std::string config;     // cluster.json with each server's client_port
  int id = -1;            // 0 leader, 1 model owner, 2
  std::string model_dir;  // config.json (all), model.safetensors (the owner)
  std::string clients;    // a client's .pub file or a folder of them: the clients admitted
  std::size_t max_sessions = 4;
  std::size_t max_batch = 8;  // sessions per batched decode step; 1: no batching
  std::size_t lanes = 1;      // batched steps in flight at once (one under an offline store)
  std::size_t max_queued = 16;
  std::size_t kv_limit_mb = 4096;
  std::size_t max_new_tokens = 1024;
  int drain_ms = 30000;
  int client_timeout_ms = 60000;  // a client that keeps its session waiting this long is dropped
  int timeout_ms = -1;            // mesh set-up and silence (-1: the config's)
  int handshake_ms = 2000;        // a client connection proves its key within this long
  std::size_t max_handshakes = 64;           // client handshakes in progress at once
  std::size_t max_handshakes_per_host = 16;  // the same, from one remote address
  ProtocolModeFlags mode;  // rss3 only: --truncation, --comparisons and the offline budgets
  bool allow_unused_weights = false;
  bool compact_weights = false;  // rss3 weights at 8 bytes per weight (Rss3Options::compact_weights)
  std::size_t threads = 1;       // this server's compute pool (1: none)
  // Scheduler::set_tick_budget: a tick of the event loop ends after this much
  // work, so that finished rounds leave while other sessions' work waits.
  int tick_us = 200;
  NetworkChoice network;
  std::string steps;   // JSON lines, one per chosen token: session, step, round clock, bytes sent (benches)
  std::string report;  // one JSON object at exit: set-up cost, sessions, peak RSS
  std::string status;  // one JSON object, rewritten each second: sessions running, the mesh's open streams
  std::uint64_t test_first_session = 0;  // tests: server 0's first session number (ServeOptions::first_session)
  std::string test_stop_at;  // tests: "SESSION:STEP", a stop as if SIGTERM came then (ServeOptions::stop_at)
};

// --compact-weights' help (generate and serve).
inline constexpr const char* compact_weights_help =
    "keep the model's weights at 8 bytes per weight and party instead of 16 (rss3: one share component kept, "
    "the other drawn again with AES at each use); less memory, slower decode (GPT-2-124M: about 1.5-2x per "
    "token in process)";

// The flags of `mpcache serve` (model_dir's default is the caller's). With
// `local`, also --local (run_local_service), and --config, --id and
// --clients are not required by the parser: the caller checks them.
void add_serve_options(CLI::App& command, ServeJob& job, bool* local = nullptr);
// Serves until SIGTERM/SIGINT (drains) or the mesh fails; logs to stderr.
// 0 after a stop, 1 when the mesh or set-up failed.
int run_server(const ServeJob& job);

struct ClientJob {
  std::string servers;  // the servers' cluster.json (host, client_port, public_key)
  std::string key;      // this client's NAME.key (NAME.pub beside it)
  std::vector<std::uint32_t> prompt;
  std::size_t tokens = 16;
  std::string policy = "mpcache";
  std::size_t budget = 0;
  std::vector<std::uint32_t> stop_tokens;
  int timeout_ms = 60000;
  double temperature = 0;   // > 0: Gumbel-max sampling (serve::ClientRequest::temperature)
  std::uint64_t seed = 0;   // the noise's seed
  std::size_t speculate = 0;  // drafts each decode step verifies (serve::ClientRequest::speculate)
  Drafter draft = {};         // the client's drafter (jobs::drafter_named); empty: lookup
  std::string link = "none";  // benches: this client's emulated link (serve::ClientOptions::link)
  std::stop_token stop;  // a stop requested here ends the request (serve::ClientOptions::stop)
  std::string fault;  // tests: "garbage" (a short prompt share for server 1), "vanish" (leave after a token), "stall" (no prompt),
                      // "garbage-drafts", "stall-drafts" (the first speculative step's rows: short for server 1, never sent)
  std::size_t retries = 0;  // serve::RetryOptions
  int retry_wait_ms = 1000;
  std::function<void(const std::string&)> on_retry;  // told of each retry (serve::RetryOptions::on_retry)
};

struct ClientReport {
  std::uint64_t session = 0;
  std::vector<std::uint32_t> tokens;
  bool eos = false;
  double seconds_to_accept = 0, seconds_to_first_token = 0;
  std::vector<double> token_seconds;
  std::size_t attempts = 1;
  std::vector<std::size_t> accepted;  // speculating: drafts accepted per decode step
};

ClientReport run_client_job(const ClientJob& job, const std::function<void(std::uint32_t)>& on_token = {});

// mpcache-party serve|client ARGS (the bench's processes): the client takes
// its prompt as bytes (--prompt TEXT) and writes its report as JSON (--json).
int serve_main(int argc, char** argv);
int client_main(int argc, char** argv);

// Writes NAME.key (0600) and NAME.pub in `dir`.
void write_client_key(const std::string& dir, const std::string& name);

// A child process started now and waited for later; stderr to `log` ("" keeps it).
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& args, const std::string& log, bool quiet_stdout = true);
  ~BackgroundProcess();  // kills it if it still runs
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  bool running();
  int pid() const { return pid_; }  // -1 once it has been waited for
  void signal(int sig);
  // Exit status (128 + signal when killed); kills it after `limit_ms`.
  int wait(int limit_ms);

 private:
  int pid_ = -1;
  int status_ = -1;
};

}  // namespace mpcache::jobs
