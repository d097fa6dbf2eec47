// See local_service.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>
import mpcache;
#include "cluster_config.hpp"
#include "local_cluster.hpp"
#include "local_service.hpp"
#include "stop_on_signal.hpp"

namespace mpcache::jobs {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_log(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tail(const std::string& text, std::size_t n = 2000) {
  return text.size() > n ? "..." + text.substr(text.size() - n) : text;
}

// A shell word: as it is when it needs no quoting, else in single quotes.
std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=+,@") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// serve --local --report R: server i writes R with ".serverI" before its
// extension (report.json -> report.server1.json), one file per process.
std::string server_report_path(const std::string& report, int i) {
  const std::filesystem::path path(report);
  auto name = path.stem().string() + ".server" + std::to_string(i) + path.extension().string();
  return (path.parent_path() / name).string();
}

}  // namespace

void add_client_ports(const std::string& config_path) {
  auto config = read_cluster_config(config_path);
  // Mesh and client ports from one call, so that none repeats.
  const auto ports = free_tcp_ports(2 * config.parties.size(), "127.0.0.1");
  for (std::size_t i = 0; i < config.parties.size(); ++i) {
    config.parties[i].port = ports[2 * i];
    config.parties[i].client_port = ports[2 * i + 1];
  }
  // read_cluster_config made the key paths absolute; write_cluster_config
  // keeps them as given: relative to the folder again.
  for (auto& p : config.parties) {
    if (!p.public_key.empty()) p.public_key = std::filesystem::path(p.public_key).filename().string();
    if (!p.secret_key.empty()) p.secret_key = std::filesystem::path(p.secret_key).filename().string();
  }
  write_cluster_config(config_path, config);
}

bool wait_servers_ready(std::vector<std::unique_ptr<BackgroundProcess>>& servers, const std::vector<std::string>& logs,
                        std::chrono::milliseconds limit, const std::function<bool()>& stopped) {
  const auto ready_by = Clock::now() + limit;
  for (;;) {
    bool ready = true;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const std::string log = read_log(logs[i]);
      if (!servers[i]->running())
        throw Error(ErrorCode::network, "server " + std::to_string(i) + " ended before it was ready: " + tail(log));
      ready = ready && log.find("ready: model shared") != std::string::npos;
    }
    if (ready) return true;
    if (stopped && stopped()) return false;
    if (Clock::now() > ready_by)
      throw Error(ErrorCode::timeout, "the servers did not share the model within " +
                                          std::to_string(limit.count() / 1000) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<std::string> serve_args(const ServeJob& o) {
  std::vector<std::string> args = {"--model", o.model_dir, "--max-sessions", std::to_string(o.max_sessions),
                                   "--max-batch", std::to_string(o.max_batch), "--lanes", std::to_string(o.lanes),
                                   "--max-queued", std::to_string(o.max_queued), "--kv-limit-mb",
                                   std::to_string(o.kv_limit_mb), "--max-new-tokens", std::to_string(o.max_new_tokens),
                                   "--drain-ms", std::to_string(o.drain_ms), "--client-timeout-ms",
                                   std::to_string(o.client_timeout_ms), "--handshake-ms", std::to_string(o.handshake_ms),
                                   "--max-handshakes", std::to_string(o.max_handshakes), "--max-handshakes-per-host",
                                   std::to_string(o.max_handshakes_per_host), "--threads", std::to_string(o.threads),
                                   "--tick-us", std::to_string(o.tick_us)};
  if (o.timeout_ms > 0) args.insert(args.end(), {"--timeout-ms", std::to_string(o.timeout_ms)});
  const auto mode = o.mode.args();
  args.insert(args.end(), mode.begin(), mode.end());
  const auto network = o.network.args();
  args.insert(args.end(), network.begin(), network.end());
  if (o.allow_unused_weights) args.push_back("--allow-unused-weights");
  if (o.compact_weights) args.push_back("--compact-weights");
  return args;
}

int run_local_service(const ServeJob& o, const std::string& self) {
  if (!o.config.empty() || o.id >= 0 || !o.clients.empty())
    throw Error(ErrorCode::invalid_argument,
                "serve --local makes its own cluster.json, ids and client key: give no --config, --id or --clients");
  if (o.network.insecure)
    throw Error(ErrorCode::invalid_argument, "serve --local: clients need the servers' keys, so not --insecure");
  o.network.check();
  (void)ModelConfig::from_json_file(std::filesystem::path(o.model_dir) / "config.json");  // a bad --model now
  const SignalNote stop;  // Ctrl-C from here on stops the servers, and us after them
  const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 60000;
  LocalCluster cluster(false, timeout_ms);
  add_client_ports(cluster.config_path());
  std::filesystem::create_directory(cluster.file("clients"));
  write_client_key(cluster.file("clients"), "local");
  const std::string key = cluster.file("clients/local.key");
  std::vector<std::unique_ptr<BackgroundProcess>> servers;
  std::vector<std::string> logs;
  const auto extra = serve_args(o);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> args{self, "serve", "--config", cluster.config_path(), "--id", std::to_string(i),
                                  "--clients", cluster.file("clients")};
    args.insert(args.end(), extra.begin(), extra.end());
    if (!o.report.empty()) args.insert(args.end(), {"--report", server_report_path(o.report, i)});
    logs.push_back(cluster.file("server" + std::to_string(i) + ".log"));
    servers.push_back(std::make_unique<BackgroundProcess>(args, logs.back()));
  }
  std::printf("mpcache serve --local: 3 servers on 127.0.0.1 (keys, cluster.json and logs in %s), sharing the model "
              "%s\n",
              cluster.dir().c_str(), o.model_dir.c_str());
  std::fflush(stdout);
  auto stop_all = [&](int sig) {
    for (auto& s : servers) s->signal(sig);
    int worst = 0;
    for (auto& s : servers) worst = std::max(worst, s->wait(o.drain_ms + 10000));
    return worst;
  };
  try {
    if (!wait_servers_ready(servers, logs, std::chrono::minutes(10), [&] { return stop.signal() != 0; })) {
      stop_all(SIGTERM);
      std::fprintf(stderr, "mpcache serve --local: stopped by signal %d before the servers were ready\n", stop.signal());
      return 0;
    }
  } catch (const std::exception& e) {
    stop_all(SIGTERM);
    std::fprintf(stderr, "mpcache serve --local: %s\n", e.what());
    return 1;
  }
  const std::string servers_file = shell_word(cluster.config_path()), key_file = shell_word(key),
                    model = shell_word(o.model_dir), exe = shell_word(self);
  std::printf("mpcache serve --local: ready. In another terminal, while this one runs:\n");
  std::printf("  client:  %s client --servers %s --key %s --model %s --prompt 'It is a truth' --tokens 8\n", exe.c_str(),
              servers_file.c_str(), key_file.c_str(), model.c_str());
  std::printf("  gateway: %s gateway --servers %s --key %s --model %s --listen 127.0.0.1:8000\n", exe.c_str(),
              servers_file.c_str(), key_file.c_str(), model.c_str());
  std::printf("Ctrl-C stops all three servers (and removes %s).\n", cluster.dir().c_str());
  std::fflush(stdout);
  for (;;) {
    if (stop.signal() != 0) {
      const int worst = stop_all(SIGTERM);  // the servers drain: sessions in flight may finish
      std::printf("mpcache serve --local: stopped (signal %d); the servers exited with status %d\n", stop.signal(),
                  worst);
      return worst == 0 ? 0 : 1;
    }
    for (std::size_t i = 0; i < servers.size(); ++i)
      if (!servers[i]->running()) {
        const std::string log = read_log(logs[i]);
        stop_all(SIGTERM);
        std::fprintf(stderr, "mpcache serve --local: server %zu ended, the others are stopped: %s\n", i,
                     tail(log).c_str());
        return 1;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace mpcache::jobs
