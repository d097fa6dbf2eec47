// Test support for the service: three servers (mpcache.serve Server) over
// an in-process mesh and clients over in-process channels of their own, on
// one loop. Include after the `import` lines.
#pragma once

namespace mpcache::serve_test {

using testing::fixture_dir;

inline std::vector<std::uint32_t> bytes_of(const std::string& text) {
  return std::vector<std::uint32_t>(text.begin(), text.end());
}

inline const std::string emma = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy";

// What generate_party gives `prompt` (the client's tokens).
inline std::vector<std::uint32_t> generated(const std::vector<std::uint32_t>& prompt, std::size_t tokens,
                                            const std::string& policy = "mpcache",
                                            const std::vector<std::uint32_t>& stops = {}) {
  return testing::generate_results(prompt, ProtocolBackend::rss3, policy, std::nullopt, tokens, stops)[0].tokens;
}

// Three servers on one loop; clients join through in-process channels.
struct Service {
  Scheduler scheduler;
  InProcessNetwork mesh{scheduler, 3};
  TimerLoop timers{scheduler};
  std::vector<std::unique_ptr<serve::Server>> servers;
  std::vector<std::unique_ptr<InProcessNetwork>> channels;  // per client: servers 0..2, the client 3
  std::vector<std::string> log;
  std::stop_source stop;
  std::array<serve::ServeStats, 3> stats;  // what each server's run() returned

  explicit Service(serve::ServeOptions options = {}) {
    options.model_dir = fixture_dir();
    options.rss3.exact_truncation = true;  // the caller's other rss3 options (comparisons) stay
    options.rss3.insecure_seed = 5;
    options.heartbeat_every = std::chrono::milliseconds(5);
    options.log = [this](const std::string& line) { log.push_back(line); };
    for (PartyId i = 0; i < 3; ++i)
      servers.push_back(std::make_unique<serve::Server>(scheduler, mesh.endpoint(i), timers.timers(), options));
  }

  // A client's channel to every server; returns the client's endpoint.
  Endpoint& connect(const std::string& name) {
    channels.push_back(std::make_unique<InProcessNetwork>(scheduler, 4));
    for (PartyId i = 0; i < 3; ++i) servers[i]->admit(channels.back()->endpoint(i), 3, name);
    return channels.back()->endpoint(3);
  }

  bool logged(const std::string& text) const {
    return std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }

  // Runs the servers and `clients` (each a task); stops the servers once
  // every client task is over.
  void run(std::vector<Task<void>> clients) {
    std::size_t left = clients.size();
    auto server_main = [&](PartyId i) -> Task<void> { stats[i] = co_await servers[i]->run(stop.get_token()); };
    auto client_main = [&](Task<void> client) -> Task<void> {
      co_await client;
      if (--left == 0) stop.request_stop();
    };
    std::vector<Task<void>> all;
    for (PartyId i = 0; i < 3; ++i) all.push_back(server_main(i));
    for (auto& c : clients) all.push_back(client_main(std::move(c)));
    sync_wait(scheduler, when_all(std::move(all)));
  }
};

struct Outcome {
  std::vector<std::uint32_t> tokens;
  serve::ClientEnd end = serve::ClientEnd::budget;
  std::string error;
};

inline Task<void> ask(Endpoint& endpoint, serve::ClientRequest request, Outcome& out) {
  try {
    auto r = co_await serve::request(endpoint, request);
    out.tokens = r.tokens;
    out.end = r.end;
  } catch (const Error& e) {
    out.error = e.what();
  }
}

inline serve::ClientRequest request_for(const std::string& text, std::size_t tokens) {
  serve::ClientRequest r;
  r.prompt = bytes_of(text);
  r.new_tokens = tokens;
  return r;
}

// A hand-made client's request for 4 prompt tokens and 3 new ones, sent to
// every server, and each server's "accepted".
inline Task<void> send_request_and_accept(Endpoint& client, serve::Nonce nonce) {
  serve::ServeRequest q;
  q.nonce = nonce;
  q.prompt_length = 4;
  q.new_tokens = 3;
  q.policy = "mpcache";
  for (PartyId s = 0; s < 3; ++s) client.send(s, serve::request_stream, q.encode());
  for (PartyId s = 0; s < 3; ++s) {
    auto r = serve::Reply::decode(co_await client.recv(s, serve::reply_stream), "server");
    REQUIRE(r.kind == serve::ReplyKind::accepted);
  }
}

// Each server's next reply; the failures, one line each ("server N: why").
inline Task<std::string> failures_from_servers(Endpoint& client) {
  std::string failures;
  for (PartyId s = 0; s < 3; ++s) {
    auto r = serve::Reply::decode(co_await client.recv(s, serve::reply_stream), "server");
    if (r.kind == serve::ReplyKind::failed) failures += "server " + std::to_string(s) + ": " + r.text() + "\n";
  }
  co_return failures;
}

}  // namespace mpcache::serve_test
