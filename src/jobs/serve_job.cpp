// See serve_job.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "cluster_config.hpp"
#include "cluster_connect.hpp"
#include "door_keeper.hpp"
#include "drafter_choice.hpp"
#include "party_job.hpp"
#include "serve_job.hpp"
#include "stop_on_signal.hpp"
#include "supervisor_notice.hpp"

extern char** environ;

namespace mpcache::jobs {
namespace {

using nlohmann::json;

void log_line(const std::string& line) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s mpcache %s\n", stamp, line.c_str());
  std::fflush(stderr);
}

// The public keys of the clients a server admits: one .pub file, or every
// .pub file of a folder, named by file name in the logs.
std::vector<ClientKeyPem> client_keys(const std::string& where) {
  namespace fs = std::filesystem;
  std::vector<ClientKeyPem> keys;
  std::error_code ec;
  if (where.empty())
    throw Error(ErrorCode::invalid_argument, "serve: --clients is required (a client's .pub file or a folder of them)");
  if (fs::is_directory(where, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(where))
      if (e.path().extension() == ".pub") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) keys.push_back({f.stem().string(), read_text_file(f.string(), "client key")});
    if (keys.empty()) throw Error(ErrorCode::invalid_argument, "serve: no .pub files in --clients folder '" + where + "'");
  } else {
    keys.push_back({fs::path(where).stem().string(), read_text_file(where, "client key")});
  }
  return keys;
}

long peak_rss_kb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

void add_serve_options(CLI::App& cmd, ServeJob& o, bool* local) {
  auto* config = cmd.add_option("--config", o.config, "cluster config: the 3 servers, with client_port and keys");
  auto* id = cmd.add_option("--id", o.id, "this server: 0 (admits sessions), 1 (model owner), 2")->check(CLI::Range(0, 2));
  cmd.add_option("--model", o.model_dir, "model directory (config.json; model.safetensors at server 1)")->capture_default_str();
  auto* clients =
      cmd.add_option("--clients", o.clients, "the admitted clients: a NAME.pub file or a folder of them (mpcache keygen --client)");
  if (local) {
    // --local makes them itself (run_local_service refuses them given).
    cmd.add_flag("--local", *local,
                 "the service on this host in one command: fresh keys, a loopback cluster.json, all three servers and "
                 "a client key; prints the client and gateway commands, Ctrl-C stops all three");
  } else {
    config->required();
    id->required();
    clients->required();
  }
  cmd.add_option("--max-sessions", o.max_sessions, "sessions running at once")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd.add_option("--max-batch", o.max_batch,
                 "sessions in their decode phase step together, at most this many per step; 1: each on its own")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  cmd.add_option("--lanes", o.lanes,
                 "batched decode steps in flight at once, the decoding sessions split evenly across them: one "
                 "step computes while another waits on its round trips, in smaller batches (1 under an offline store)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd.add_option("--max-queued", o.max_queued, "requests waiting beyond those; more are refused \"busy\"")
      ->capture_default_str()->check(CLI::Range(0, 1 << 16));
  cmd.add_option("--kv-limit-mb", o.kv_limit_mb, "KV-cache memory of the running sessions, per server")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd.add_option("--max-new-tokens", o.max_new_tokens, "the most tokens one request may ask for")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--drain-ms", o.drain_ms, "after SIGTERM, sessions in flight get this long")->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  cmd.add_option("--client-timeout-ms", o.client_timeout_ms, "a client that keeps its session waiting this long is dropped")
      ->capture_default_str()->check(CLI::Range(100, 3600000));
  cmd.add_option("--handshake-ms", o.handshake_ms, "a client connection must prove its key within this long")
      ->capture_default_str()->check(CLI::Range(100, 600000));
  cmd.add_option("--max-handshakes", o.max_handshakes, "client handshakes in progress at once; more connections are closed")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd.add_option("--max-handshakes-per-host", o.max_handshakes_per_host,
                 "client handshakes in progress at once from one remote address")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd.add_option("--timeout-ms", o.timeout_ms, "mesh set-up and silence deadline (default: the config's)")
      ->check(CLI::Range(100, 3600000));
  // The service runs rss3 (run_server refuses add2); exact+offline and
  // dcf+offline refill between batched steps, so they need --max-batch > 1
  // (the server says so).
  add_protocol_mode_options(cmd, o.mode);
  cmd.add_flag("--allow-unused-weights", o.allow_unused_weights, "run even if the config leaves tensors unused");
  cmd.add_flag("--compact-weights", o.compact_weights, compact_weights_help);
  add_threads_option(cmd, o.threads);
  cmd.add_option("--steps", o.steps,
                 "write one JSON line per chosen token (session, step; online rounds and bytes; the offline "
                 "refills' rounds, bytes and seconds so far; DCF elements dealt inline so far): benches");
  cmd.add_option("--test-stop-at", o.test_stop_at,
                 "tests: SESSION:STEP, stop as if SIGTERM came when that session is launched here (STEP -1) or "
                 "this server chose its token STEP (0: the prefill's)")
      ->group("");
  cmd.add_option("--test-first-session", o.test_first_session,
                 "tests: server 0 numbers sessions from here (e.g. just below the wrap of the 16-bit session scopes)")
      ->group("");
  cmd.add_option("--report", o.report,
                 "write one JSON object at exit (set-up cost, sessions, peak RSS); --local: one per server, "
                 "named R.server0.json, R.server1.json, R.server2.json for R.json");
  cmd.add_option("--status-file", o.status,
                 "rewrite this file each second with one JSON object: sessions running and the mesh's open streams "
                 "(receives waiting, streams holding frames, scopes cancelled): for a monitor, or the soak bench");
  cmd.add_option("--tick-us", o.tick_us,
                 "end a tick of the event loop after this many microseconds of work: the rounds finished so far "
                 "leave and arrivals come in before the other sessions' work goes on (0: a tick runs everything "
                 "ready, as generate's parties do)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  add_network_options(cmd, o.network);
}

int run_server(const ServeJob& o) {
  const ClusterConfig cluster = read_cluster_config(o.config);
  if (o.id < 0 || o.id > 2) throw Error(ErrorCode::bad_party, "serve: --id must be 0, 1 or 2");
  const auto id = static_cast<PartyId>(o.id);
  const auto& me = cluster.parties[id];
  if (me.client_port == 0)
    throw Error(ErrorCode::invalid_argument, o.config + ": parties[" + std::to_string(id) +
                                                 "] has no client_port (the port where this server takes clients)");
  if (o.network.insecure) throw Error(ErrorCode::invalid_argument, "serve: clients need keys; --insecure is not offered");
  const auto allowed = client_keys(o.clients);
  const std::string secret = read_text_file(me.secret_key, "secret key of server " + std::to_string(id));
  const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : cluster.timeout_ms;

  Scheduler scheduler;
  scheduler.set_tick_budget(std::chrono::microseconds(o.tick_us));
  StopOnSignal stop(scheduler);  // SIGTERM drains
  ClientDoor door(me.host, me.client_port, id, secret, allowed);
  log_line("server " + std::to_string(id) + ": connecting to the other servers");
  Endpoint mesh(scheduler, id, 3);
  ClusterConnection connection(scheduler, mesh, cluster, o.config, id, o.network, timeout_ms);
  LoopInbox inbox(scheduler);
  inbox.keep_alive(true);  // the door's posts wake the loop wherever it sleeps
  inbox.wake_on_stop(stop.token());

  std::FILE* steps = o.steps.empty() ? nullptr : std::fopen(o.steps.c_str(), "w");
  if (!o.steps.empty() && !steps) throw Error(ErrorCode::io, "cannot write '" + o.steps + "'");
  std::optional<ComputePool> pool;  // outlives the service below
  if (o.threads > 1) pool.emplace(o.threads);
  serve::ServeOptions so;
  so.model_dir = o.model_dir;
  so.max_sessions = o.max_sessions;
  so.max_batch = o.max_batch;
  so.decode_lanes = o.lanes;
  so.max_queued = o.max_queued;
  so.kv_bytes_limit = std::uint64_t(o.kv_limit_mb) << 20;
  so.max_new_tokens = o.max_new_tokens;
  so.drain_within = std::chrono::milliseconds(o.drain_ms);
  // A client proves its key to each server within --handshake-ms, so its
  // request may reach server 0 that much after another server: wait for
  // it at least that long before refusing it as unmatched.
  so.match_within = std::max(so.match_within, std::chrono::milliseconds(o.handshake_ms));
  so.unused_weights = o.allow_unused_weights ? UnusedTensors::allow : UnusedTensors::reject;
  const ProtocolMode mode = o.mode.mode();
  if (mode.backend != ProtocolBackend::rss3)
    throw Error(ErrorCode::invalid_argument, "serve: the service runs rss3; --protocol " + o.mode.protocol +
                                                 " is not offered");
  so.rss3 = mode.rss3();
  so.rss3.compact_weights = o.compact_weights;
  so.rss3.pool = pool ? &*pool : nullptr;
  // The session's deadline tells the client why; the transport's, 2 s later, is the backstop.
  so.prompt_within = std::chrono::milliseconds(o.client_timeout_ms);
  so.client_tcp = o.network.tcp_options(std::chrono::milliseconds(o.client_timeout_ms + 2000));
  so.log = log_line;
  if (!o.test_stop_at.empty()) {
    const auto colon = o.test_stop_at.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      so.stop_at = serve::ServeOptions::StopAt{std::stoull(o.test_stop_at.substr(0, colon)),
                                               std::stoll(o.test_stop_at.substr(colon + 1))};
    } catch (const std::exception&) {
      throw Error(ErrorCode::invalid_argument, "--test-stop-at '" + o.test_stop_at + "': expected SESSION:STEP");
    }
  }
  so.first_session = o.test_first_session;
  // A supervisor with Type=notify starts the next unit only now: the model is shared.
  so.on_ready = [id] {
    if (const auto why = notify_supervisor("READY=1\nSTATUS=serving"); !why.empty())
      log_line("server " + std::to_string(id) + ": could not tell the supervisor it is ready: " + why);
  };
  if (steps)
    so.on_step = [steps](const serve::StepReport& r) {
      std::fprintf(steps, "%s\n",
                   json({{"session", r.session},
                         {"step", r.step},
                         {"rounds", r.rounds},
                         {"bytes", r.bytes},
                         {"offline_rounds", r.offline.rounds},
                         {"offline_bytes", r.offline.bytes},
                         {"offline_s", r.offline.seconds},
                         {"dealt_inline", r.dealt_inline}})
                       .dump()
                       .c_str());
      std::fflush(steps);
    };
  serve::Server server(scheduler, mesh, connection.transport().timers(), so);

  // The door's threads (ours, not the library's): they block in accept and
  // in each client's key exchange, so a slow or hostile stranger never
  // stalls the loop or another client; each client that proves its key is
  // handed to the loop.
  DoorLimits limits;
  limits.max_handshakes = o.max_handshakes;
  limits.per_host = o.max_handshakes_per_host;
  limits.handshake_within = std::chrono::milliseconds(o.handshake_ms);
  std::optional<DoorKeeper> door_keeper;
  door_keeper.emplace(door, limits, [&](ClientChannel c) { inbox.post([&server, c] { server.admit(c); }); }, log_line);
  log_line("server " + std::to_string(id) + ": clients on " + me.host + ":" + std::to_string(door.port()) + ", " +
           std::to_string(allowed.size()) + " client keys");
  // --status-file, on the loop's thread each second: written beside, then renamed, so a reader sees it whole.
  // Not once the service has stopped: the transport's shutdown waits for its timers.
  bool serving = true;
  TimerQueue::Id status_timer = 0;
  std::function<void()> write_status = [&] {
    if (!serving) return;
    const auto c = mesh.stream_counts();
    const json now = {{"server", id},
                      {"ready", server.ready()},
                      {"sessions_running", server.sessions_running()},
                      {"mesh_streams", c.receiving + c.holding},
                      {"mesh_receiving", c.receiving},
                      {"mesh_holding", c.holding},
                      {"mesh_held_frames", c.held_frames},
                      {"cancelled_scopes", c.cancelled_scopes}};
    try {
      write_text_file(o.status + ".new", now.dump() + "\n", false);
      std::filesystem::rename(o.status + ".new", o.status);
    } catch (const std::exception& e) {
      log_line("server " + std::to_string(id) + ": cannot write its status to " + o.status + ": " + e.what());
      return;  // not again: the log would fill
    }
    status_timer = connection.transport().timers().at(SteadyClock::now() + std::chrono::seconds(1), write_status);
  };
  if (!o.status.empty()) write_status();
  int status = 0;
  json report = {{"server", id}};
  try {
    const auto stats = sync_wait(scheduler, server.run(stop.token()));
    // A drain that another server's stop began: this one exits 1, so that
    // its supervisor (Restart=on-failure) brings it back for the mesh to re-form.
    if (stats.drained && stop.signal() == 0 && stats.stop_asked_by != static_cast<int>(id)) {
      log_line("server " + std::to_string(id) + ": the service drained because server " +
               std::to_string(stats.stop_asked_by) + " was asked to stop; exiting with status 1 to be restarted");
      status = 1;
    }
    report["drained"] = stats.drained;
    report["stop_asked_by"] = stats.stop_asked_by;
    report["setup_seconds"] = stats.setup_seconds;
    report["setup_bytes_sent"] = stats.setup_costs.payload_bytes_sent();
    report["sessions_done"] = stats.sessions_done;
    report["sessions_failed"] = stats.sessions_failed;
    report["refused"] = stats.refused;
    report["batched_steps"] = stats.batched_steps;
    report["batched_rows"] = stats.batched_rows;
    report["speculative_steps"] = stats.speculative_steps;
    report["mixed_steps"] = stats.mixed_steps;
    report["offline_refills"] = stats.offline.refills;
    report["offline_bytes_sent"] = stats.offline.bytes;
    report["offline_s"] = stats.offline.seconds;
    report["comparisons_from_store"] = stats.comparisons_from_store;
    report["comparisons_inline"] = stats.comparisons_inline;
    report["store_ran_dry"] = stats.store_ran_dry;
    report["truncations_with_pairs"] = stats.truncations_with_pairs;
    report["truncations_in_two_rounds"] = stats.truncations_in_two_rounds;
  } catch (const std::exception& e) {
    log_line("server " + std::to_string(id) + " stopped: " + e.what());
    report["error"] = e.what();
    status = stop.signal() != 0 ? 0 : 1;
  }
  serving = false;
  if (status_timer != 0) (void)connection.transport().timers().cancel(status_timer);
  (void)notify_supervisor("STOPPING=1");
  door_keeper.reset();
  if (steps) std::fclose(steps);
  report["peak_rss_kb"] = peak_rss_kb();
  if (!o.report.empty()) write_text_file(o.report, report.dump() + "\n", false);
  return status;
}

ClientReport run_client_job(const ClientJob& o, const std::function<void(std::uint32_t)>& on_token) {
  const ClusterConfig cluster = read_cluster_config(o.servers);
  serve::ClientOptions co;
  for (PartyId s = 0; s < 3; ++s) {
    const auto& p = cluster.parties[s];
    if (p.client_port == 0 || p.public_key.empty())
      throw Error(ErrorCode::invalid_argument, o.servers + ": parties[" + std::to_string(s) +
                                                   "] needs client_port and public_key for a client");
    co.servers[s] = {p.host, p.client_port, read_text_file(p.public_key, "public key of server " + std::to_string(s))};
  }
  if (o.key.empty())
    throw Error(ErrorCode::invalid_argument, "client: --key NAME.key is required (mpcache keygen --client NAME)");
  co.secret_key_pem = read_text_file(o.key, "this client's secret key");
  co.public_key_pem = read_text_file(std::filesystem::path(o.key).replace_extension(".pub").string(),
                                     "this client's public key (beside its secret key)");
  co.connect_timeout = std::chrono::milliseconds(o.timeout_ms);
  co.tcp.silence_timeout = std::chrono::milliseconds(o.timeout_ms);
  co.stop = o.stop;
  co.retry.retries = o.retries;
  co.retry.wait = std::chrono::milliseconds(o.retry_wait_ms);
  co.retry.on_retry = o.on_retry;
  co.link = link_named(o.link);
  serve::ClientRequest req;
  req.prompt = o.prompt;
  req.new_tokens = o.tokens;
  req.policy = o.policy;
  req.budget = o.budget;
  req.stop_tokens = o.stop_tokens;
  req.temperature = o.temperature;
  req.seed = o.seed;
  req.speculate = o.speculate;
  req.draft = o.draft;
  if (o.fault == "garbage") req.fault = serve::ClientRequest::Fault::garbage_share;
  else if (o.fault == "vanish") req.fault = serve::ClientRequest::Fault::vanish;
  else if (o.fault == "stall") req.fault = serve::ClientRequest::Fault::stall;
  else if (o.fault == "garbage-drafts") req.fault = serve::ClientRequest::Fault::garbage_drafts;
  else if (o.fault == "stall-drafts") req.fault = serve::ClientRequest::Fault::stall_drafts;
  else if (!o.fault.empty())
    throw Error(ErrorCode::invalid_argument,
                "--fault '" + o.fault + "': garbage, vanish, stall, garbage-drafts or stall-drafts");
  const auto r = serve::run_client(co, req, on_token);
  return {r.session,       r.tokens,   r.end == serve::ClientEnd::eos, r.seconds_to_accept, r.seconds_to_first_token,
          r.token_seconds, r.attempts, r.accepted};
}

int serve_main(int argc, char** argv) {
  CLI::App app{"mpcache-party serve: one server of a private inference service (the bench's; = mpcache serve)"};
  ServeJob job;
  add_serve_options(app, job);
  CLI11_PARSE(app, argc, argv);
  try {
    return run_server(job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-party serve: %s\n", e.what());
    return 1;
  }
}

int client_main(int argc, char** argv) {
  CLI::App app{"mpcache-party client: one request to a service, the prompt as bytes (the bench's)"};
  ClientJob job;
  std::string prompt, out;
  app.add_option("--servers", job.servers, "the servers' cluster config")->required();
  app.add_option("--key", job.key, "this client's NAME.key")->required();
  app.add_option("--prompt", prompt, "the prompt: its bytes are the token ids")->required();
  app.add_option("--tokens", job.tokens, "tokens to generate");
  app.add_option("--policy", job.policy, "KV-cache policy");
  app.add_option("--timeout-ms", job.timeout_ms, "connect and silence deadline");
  app.add_option("--json", out, "write the report here");
  app.add_option("--fault", job.fault, "tests: garbage (a short prompt share for server 1), vanish (leave after a token) or stall (never send the prompt)");
  std::string draft = "lookup";
  app.add_option("--speculate", job.speculate, "drafts each decode step verifies (0: none)");
  app.add_option("--draft", draft, "the drafter for --speculate: lookup, ngram:FILE or model:DIR (bytes)");
  app.add_option("--link", job.link, "this client's emulated link: none, lan, wan or RTT_MS:MBYTES_PER_S");
  CLI11_PARSE(app, argc, argv);
  try {
    for (unsigned char c : prompt) job.prompt.push_back(c);
    if (job.speculate > 0)
      job.draft = drafter_named(draft, /*target_vocab=*/256, [](std::string_view text) {  // byte tokens
        std::vector<std::uint32_t> ids;
        for (unsigned char c : text) ids.push_back(c);
        return ids;
      });
    const auto r = run_client_job(job);
    const json report = {{"session", r.session},
                         {"tokens", r.tokens},
                         {"seconds_to_accept", r.seconds_to_accept},
                         {"seconds_to_first_token", r.seconds_to_first_token},
                         {"token_seconds", r.token_seconds},
                         {"accepted", r.accepted}};
    if (out.empty()) std::printf("%s\n", report.dump().c_str());
    else write_text_file(out, report.dump() + "\n", false);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-party client: %s\n", e.what());
    return 1;
  }
}

void write_client_key(const std::string& dir, const std::string& name) {
  auto [secret, pub] = generate_party_key();
  write_key_file(dir + "/" + name + ".key", secret, 0600, false);
  write_key_file(dir + "/" + name + ".pub", pub, 0644, false);
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& args, const std::string& log, bool quiet_stdout) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (quiet_stdout) ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (!log.empty()) ::posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, copy.at(0).c_str(), &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(ErrorCode::io, "cannot start " + copy.at(0) + ": " + std::strerror(rc));
  pid_ = pid;
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

bool BackgroundProcess::running() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    pid_ = -1;
    return false;
  }
  return true;
}

void BackgroundProcess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int BackgroundProcess::wait(int limit_ms) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (running()) {
    if (std::chrono::steady_clock::now() > limit) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      status_ = 128 + SIGKILL;
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

}  // namespace mpcache::jobs
