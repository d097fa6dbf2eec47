// `mpcache serve` and `mpcache client` (see serve.hpp): flags in, a running
// server or one request out. The service is mpcache::serve::Server and
// mpcache::serve::run_client (modules/serve/).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>
import mpcache;
#include "client_text.hpp"
#include "cluster_config.hpp"
#include "cluster_connect.hpp"
#include "serve.hpp"
#include "stop_on_signal.hpp"

namespace mpcache::tools {
namespace {

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
// .pub file of a folder. Named by file name in the logs.
std::vector<ClientKeyPem> client_keys(const std::string& where) {
  namespace fs = std::filesystem;
  std::vector<ClientKeyPem> keys;
  std::error_code ec;
  if (where.empty()) throw Error(ErrorCode::invalid_argument, "serve: --clients is required (a client's .pub file or a folder of them)");
  if (fs::is_directory(where, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(where))
      if (e.path().extension() == ".pub") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) keys.push_back({f.stem().string(), jobs::read_text_file(f.string(), "client key")});
    if (keys.empty()) throw Error(ErrorCode::invalid_argument, "serve: no .pub files in --clients folder '" + where + "'");
  } else {
    keys.push_back({fs::path(where).stem().string(), jobs::read_text_file(where, "client key")});
  }
  return keys;
}

std::string read_prompt(const ClientCliOptions& o) {
  if (o.prompt_file.empty()) return o.prompt;
  return jobs::read_text_file(o.prompt_file, "prompt file");
}

}  // namespace

int run_serve(const ServeCliOptions& o) {
  const jobs::ClusterConfig cluster = jobs::read_cluster_config(o.config);
  if (o.id < 0 || o.id > 2) throw Error(ErrorCode::bad_party, "serve: --id must be 0, 1 or 2");
  const auto id = static_cast<PartyId>(o.id);
  const auto& me = cluster.parties[id];
  if (me.client_port == 0)
    throw Error(ErrorCode::invalid_argument, o.config + ": parties[" + std::to_string(id) +
                                                 "] has no client_port (the port where this server takes clients)");
  if (o.network.insecure) throw Error(ErrorCode::invalid_argument, "serve: clients need keys; --insecure is not offered");
  const auto allowed = client_keys(o.clients);
  const std::string secret = jobs::read_text_file(me.secret_key, "secret key of server " + std::to_string(id));
  const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : cluster.timeout_ms;

  jobs::SignalNote note;  // SIGTERM drains (below); before the loop exists, it ends set-up
  Scheduler scheduler;
  jobs::StopOnSignal stop(scheduler);
  ClientDoor door(me.host, me.client_port, id, secret, allowed);
  log_line("server " + std::to_string(id) + ": connecting to the other servers");
  Endpoint mesh(scheduler, id, 3);
  jobs::ClusterConnection connection(scheduler, mesh, cluster, o.config, id, o.network, timeout_ms);
  LoopInbox inbox(scheduler);

  serve::ServeOptions so;
  so.model_dir = o.model_dir;
  so.max_sessions = o.max_sessions;
  so.max_queued = o.max_queued;
  so.kv_bytes_limit = std::uint64_t(o.kv_limit_mb) << 20;
  so.max_new_tokens = o.max_new_tokens;
  so.drain_within = std::chrono::milliseconds(o.drain_ms);
  so.unused_weights = o.allow_unused_weights ? UnusedTensors::allow : UnusedTensors::reject;
  so.rss3.exact_truncation = o.truncation == "exact";
  so.client_tcp = o.network.tcp_options(std::chrono::milliseconds(o.client_timeout_ms));
  so.log = log_line;
  serve::Server server(scheduler, mesh, connection.transport().timers(), so);

  // The door's thread: it blocks in accept and the key exchange, so a slow
  // or hostile stranger never stalls the loop; each client that proves its
  // key is handed to the loop through the inbox.
  std::jthread door_thread([&](std::stop_token done) {
    while (!done.stop_requested()) {
      try {
        auto channel = door.accept(std::chrono::steady_clock::now() + std::chrono::milliseconds(200), log_line);
        if (channel) inbox.post([&server, c = *channel] { server.admit(c); });
      } catch (const std::exception& e) {
        log_line(std::string("client door: ") + e.what());
      }
    }
  });
  log_line("server " + std::to_string(id) + ": clients on " + me.host + ":" + std::to_string(door.port()) + ", " +
           std::to_string(allowed.size()) + " client keys");
  int status = 0;
  try {
    const auto stats = sync_wait(scheduler, server.run(stop.token()));
    log_line("server " + std::to_string(id) + ": setup " + std::to_string(stats.setup_seconds) + " s, " +
             std::to_string(stats.setup_costs.payload_bytes_sent()) + " bytes sent once for the weights and keys");
  } catch (const std::exception& e) {
    log_line("server " + std::to_string(id) + " stopped: " + e.what());
    status = stop.signal() != 0 ? 0 : 1;
  }
  door_thread.request_stop();
  door_thread.join();
  return status;
}

int run_client(const ClientCliOptions& o) {
  const jobs::ClusterConfig cluster = jobs::read_cluster_config(o.servers);
  serve::ClientOptions co;
  for (PartyId s = 0; s < 3; ++s) {
    const auto& p = cluster.parties[s];
    if (p.client_port == 0 || p.public_key.empty())
      throw Error(ErrorCode::invalid_argument, o.servers + ": parties[" + std::to_string(s) +
                                                   "] needs client_port and public_key for a client");
    co.servers[s] = {p.host, p.client_port, jobs::read_text_file(p.public_key, "public key of server " + std::to_string(s))};
  }
  if (o.key.empty()) throw Error(ErrorCode::invalid_argument, "client: --key NAME.key is required (mpcache keygen --client NAME)");
  co.secret_key_pem = jobs::read_text_file(o.key, "this client's secret key");
  const std::string pub = std::filesystem::path(o.key).replace_extension(".pub").string();
  co.public_key_pem = jobs::read_text_file(pub, "this client's public key (beside its secret key)");
  co.connect_timeout = std::chrono::milliseconds(o.timeout_ms);
  co.tcp.silence_timeout = std::chrono::milliseconds(o.timeout_ms);

  const ModelConfig config = ModelConfig::from_json_file(std::filesystem::path(o.model_dir) / "config.json");
  auto tok = client_tokenizer(o.tokenizer, o.model_dir, config.vocab_size);
  serve::ClientRequest req;
  req.prompt = encode_prompt(*tok, read_prompt(o));
  req.new_tokens = o.tokens;
  req.policy = o.policy;
  req.budget = o.budget;
  if (!o.ignore_eos) req.stop_tokens = tok->eos_ids();
  TextStream text(*tok);
  const auto result = serve::run_client(co, req, [&](std::uint32_t id) {
    if (o.ids) std::printf("%u\n", id);
    else if (!tok->is_eos(id)) std::printf("%s", text.push(id).c_str());
    std::fflush(stdout);
  });
  if (!o.ids) std::printf("%s\n", text.finish().c_str());
  std::vector<double> sorted = result.token_seconds;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double q) { return sorted.empty() ? 0.0 : sorted[std::min(sorted.size() - 1, std::size_t(q * double(sorted.size())))]; };
  std::fprintf(stderr, "mpcache client: session %llu, %zu tokens (%s), first token after %.3f s, per token p50 %.3f s p99 %.3f s\n",
               static_cast<unsigned long long>(result.session), result.tokens.size(),
               result.end == serve::ClientEnd::eos ? "eos" : "budget", result.seconds_to_first_token, pct(0.5), pct(0.99));
  if (!o.json.empty()) {
    nlohmann::json j = {{"session", result.session},
                        {"tokens", result.tokens},
                        {"text", text.text()},
                        {"end", result.end == serve::ClientEnd::eos ? "eos" : "budget"},
                        {"seconds_to_accept", result.seconds_to_accept},
                        {"seconds_to_first_token", result.seconds_to_first_token},
                        {"token_seconds", result.token_seconds}};
    std::ofstream(o.json) << j.dump() << "\n";
  }
  return 0;
}

}  // namespace mpcache::tools
