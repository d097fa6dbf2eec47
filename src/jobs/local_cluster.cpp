// See local_cluster.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <charconv>
#include <thread>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
import mpcache;
#include "cluster_config.hpp"
#include "local_cluster.hpp"
#include "stop_on_signal.hpp"

extern char** environ;

namespace mpcache::jobs {

LocalCluster::LocalCluster(bool insecure, int timeout_ms, int parties) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mpcache-local-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    throw Error(ErrorCode::io, "cannot create a temporary folder '" + tmpl + "': " + std::strerror(errno));
  dir_ = tmpl;
  try {
    ClusterConfig config;
    config.timeout_ms = timeout_ms;
    const auto ports = free_tcp_ports(static_cast<std::size_t>(parties), "127.0.0.1");
    for (int i = 0; i < parties; ++i) {
      ClusterParty p{"127.0.0.1", ports[static_cast<std::size_t>(i)], "", ""};
      if (!insecure) {
        auto [secret, pub] = generate_party_key();
        p.secret_key = "p" + std::to_string(i) + ".key";
        p.public_key = "p" + std::to_string(i) + ".pub";
        write_text_file(file(p.secret_key), secret, true);
        write_text_file(file(p.public_key), pub, false);
      }
      config.parties.push_back(p);
    }
    write_cluster_config(config_path(), config);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

LocalCluster::~LocalCluster() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::pair<int, std::string> parse_fault(const std::string& fault, const std::vector<std::string>& kinds,
                                        int parties) {
  if (fault.empty()) return {-1, ""};
  std::string forms, ids;
  for (std::size_t k = 0; k < kinds.size(); ++k) forms += (k ? " or PARTY:" : "PARTY:") + kinds[k];
  for (int i = 0; i < parties; ++i) ids += (i == 0 ? "" : i + 1 == parties ? " or " : ", ") + std::to_string(i);
  const std::string usage = "--fault '" + fault + "': expected " + forms + " with PARTY " + ids;
  const auto colon = fault.find(':');
  if (colon == std::string::npos) throw Error(ErrorCode::invalid_argument, usage);
  const std::string who = fault.substr(0, colon), kind = fault.substr(colon + 1);
  int party = -1;
  const auto [end, ec] = std::from_chars(who.data(), who.data() + who.size(), party);
  if (who.empty() || ec != std::errc{} || end != who.data() + who.size() || party < 0 || party >= parties)
    throw Error(ErrorCode::invalid_argument, usage + " (no party '" + who + "')");
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
    throw Error(ErrorCode::invalid_argument, usage + " (no fault '" + kind + "')");
  return {party, kind};
}

std::vector<PartyExit> run_party_processes(const std::vector<PartyProcess>& processes, int fault_party,
                                           int limit_ms, bool* killed_late, int* stopped_by, int grace_ms,
                                           const std::function<void(std::size_t)>& after_start) {
  using Clock = std::chrono::steady_clock;
  const SignalNote stop_note;
  const std::size_t n = processes.size();
  std::vector<pid_t> pids(n, -1);
  auto kill_started = [&] {
    for (auto& pid : pids)
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        pid = -1;
      }
  };
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::string> args = processes[i].args;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    if (processes[i].quiet) ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    const int rc = ::posix_spawn(&pids[i], args.at(0).c_str(), &actions, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pids[i] = -1;
      kill_started();
      throw Error(ErrorCode::io, "cannot start party " + std::to_string(i) + " (" + args.at(0) + ")");
    }
    if (after_start) after_start(i);
  }
  auto limit = Clock::now() + std::chrono::milliseconds(limit_ms);
  std::vector<int> status(n, -1);
  std::size_t running = n;
  if (killed_late) *killed_late = false;
  bool passed_on = false;
  while (running > 0) {
    // A stop for the launcher is one for the parties (a terminal's Ctrl-C
    // reaches them too; kill -INT of the launcher alone does not).
    if (stop_note.signal() != 0 && !passed_on) {
      passed_on = true;
      for (auto p : pids)
        if (p > 0) ::kill(p, stop_note.signal());
      limit = std::min(limit, Clock::now() + std::chrono::milliseconds(grace_ms));
    }
    // Our own children only: a host program (the Python package's caller)
    // may have children of its own to reap.
    bool reaped = false;
    for (std::size_t i = 0; i < n; ++i) {
      int st = 0;
      if (pids[i] > 0 && ::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st, pids[i] = -1, --running;
        reaped = true;
      }
    }
    if (reaped) {
      // The faulty party is not waited for once the others are done.
      if (fault_party >= 0 && running == 1 && pids.at(fault_party) > 0) ::kill(pids[fault_party], SIGKILL);
      continue;
    }
    if (Clock::now() > limit) {
      for (auto p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      if (killed_late) *killed_late = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (stopped_by) *stopped_by = stop_note.signal();
  std::vector<PartyExit> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].status = WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : 128 + WTERMSIG(status[i]);
    out[i].ok = WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;
  }
  return out;
}

}  // namespace mpcache::jobs
