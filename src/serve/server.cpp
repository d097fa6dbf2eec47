// Server (modules/serve/server.cppm): its options checked, the model shared
// once, then its parts (modules/serve/server_parts.cppm) serve until a stop
// or until the mesh fails.
module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.model;

namespace mpcache::serve {

ServerContext::ServerContext(Scheduler& s, Endpoint& m, TimerQueue& t, ServeOptions o)
    : scheduler(s), mesh(m), timers(t), options(std::move(o)),
      config(ModelConfig::from_json_file(options.model_dir / "config.json")),
      tasks(s, [this](const std::string& why) { log("task failed: " + why); }), changed(s) {
  if (mesh.parties() != 3)
    throw Error(ErrorCode::invalid_argument, "serve: the mesh has " + std::to_string(mesh.parties()) +
                                                 " parties, the service needs 3");
  if (options.owner > 2) throw Error(ErrorCode::bad_party, "serve: the model owner must be server 0, 1 or 2");
  if (options.rss3.offline_budget > 0 && options.rss3.comparisons != Rss3Comparisons::dcf)
    throw Error(ErrorCode::invalid_argument,
                "serve: an offline store (rss3.offline_budget) holds DCF keys, but comparisons are not dcf");
  // The store is refilled at a point where no DCF comparison is in flight:
  // the start of a batched step. Sessions that decode on their own have none.
  if (options.rss3.offline_budget > 0 && options.max_batch < 2)
    throw Error(ErrorCode::invalid_argument,
                "serve: an offline store of DCF keys is refilled between batched steps, so it needs max_batch > 1 "
                "(it is " + std::to_string(options.max_batch) + ")");
  // Truncation pairs: the same, at the same quiet point.
  if (options.rss3.truncation_pairs_budget > 0 && !options.rss3.exact_truncation)
    throw Error(ErrorCode::invalid_argument,
                "serve: truncation pairs (rss3.truncation_pairs_budget) serve exact truncation, which is off");
  if (options.decode_lanes < 1 || options.decode_lanes > max_lanes)
    throw Error(ErrorCode::invalid_argument, "serve: decode_lanes is " + std::to_string(options.decode_lanes) +
                                                 ", it must be 1 to " + std::to_string(max_lanes));
  if (options.rss3.truncation_pairs_budget > 0 && options.max_batch < 2)
    throw Error(ErrorCode::invalid_argument,
                "serve: truncation pairs are made between batched steps, so they need max_batch > 1 (it is " +
                    std::to_string(options.max_batch) + ")");
}

// The parts hold references to one another; none uses another while they
// are built. Destroyed in reverse: the batcher's lane streams and sessions'
// decoders before the party and weights they use.
struct Server::Impl {
  ServerContext server;
  Liveness liveness;
  Admission admission;
  Sessions sessions;
  Batcher batcher;

  Impl(Scheduler& s, Endpoint& m, TimerQueue& t, ServeOptions o)
      : server(s, m, t, std::move(o)),
        liveness(server, admission, sessions),
        admission(server, sessions, liveness),
        sessions(server, admission, batcher, liveness),
        batcher(server, sessions, liveness) {}
};

Server::Server(Scheduler& scheduler, Endpoint& mesh, TimerQueue& timers, ServeOptions options)
    : impl_(std::make_unique<Impl>(scheduler, mesh, timers, std::move(options))) {}

Server::~Server() = default;

bool Server::ready() const noexcept { return impl_->server.is_ready; }
std::size_t Server::sessions_running() const noexcept { return impl_->sessions.active(); }

void Server::admit(ClientChannel channel) {
  auto& I = *impl_;
  auto link = make_shared<ClientLink>();
  link->name = channel.peer + " (" + channel.remote + ", connection " + std::to_string(I.admission.next_link_number()) + ")";
  link->owned_endpoint = std::make_unique<Endpoint>(I.server.scheduler, 0, 2);
  link->endpoint = link->owned_endpoint.get();
  link->client_peer = 1;
  Connections c;
  c.fds = {-1, channel.fd};
  c.keys = {std::nullopt, channel.keys};
  c.names = {"server " + std::to_string(I.server.id()), "client " + link->name};
  link->transport =
      std::make_unique<TcpTransport>(I.server.scheduler, *link->endpoint, std::move(c), I.server.options.client_tcp);
  I.admission.welcome(std::move(link));
}

void Server::admit(Endpoint& endpoint, PartyId client, std::string name) {
  auto& I = *impl_;
  auto link = make_shared<ClientLink>();
  link->name = std::move(name) + " (connection " + std::to_string(I.admission.next_link_number()) + ")";
  link->endpoint = &endpoint;
  link->client_peer = client;
  I.admission.welcome(std::move(link));
}

Task<ServeStats> Server::run(std::stop_token stop) {
  auto& I = *impl_;
  ServerContext& S = I.server;
  S.stop = std::move(stop);
  const auto t0 = SteadyClock::now();
  const CostCounters start = S.mesh.costs();
  std::exception_ptr failed;
  I.liveness.beat_clients();  // clients may connect while the model is shared
  try {
    S.party = co_await Rss3Party::setup(S.mesh, S.options.rss3);
    Rss3 p = S.party->session();
    const WeightSource source = S.id() == S.options.owner
                                    ? weights_from_file(S.options.model_dir / "model.safetensors", S.options.unused_weights)
                                    : no_weights();
    S.weights = co_await load_decoder(p, S.config, source, S.options.owner);
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {  // clients that came meanwhile are told, then the error goes on
    S.stopping = true;
    S.changed.notify();
    I.liveness.close_links();
    co_await S.tasks.idle();
    std::rethrow_exception(failed);
  }
  S.stats.setup_seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  S.stats.setup_costs = S.mesh.costs() - start;
  S.is_ready = true;
  S.changed.notify();
  S.log("ready: model shared in " + std::to_string(S.stats.setup_seconds) + " s (" +
        std::to_string(S.stats.setup_costs.payload_bytes_sent()) + " bytes sent); " + S.config.summary());
  if (S.options.on_ready) S.options.on_ready();
  for (PartyId peer = 0; peer < 3; ++peer)
    if (peer != S.id()) S.tasks.spawn(I.liveness.hear_heartbeats(peer));
  if (S.id() != leader) S.tasks.spawn(I.admission.hear_announcements());
  for (PartyId peer = 0; peer < 3; ++peer)
    if (peer != S.id() && (S.id() == leader || peer == leader)) S.tasks.spawn(I.liveness.hear_drain(peer));
  I.batcher.start();
  I.liveness.beat();
  // A stop asked here goes to the leader, which drains the service and says
  // when every session it admitted has ended at all three servers.
  while (!I.liveness.drain_step() && !S.mesh_lost && !S.mesh.cancelled()) co_await S.changed.wait();
  if (S.drain_complete) {
    co_await I.liveness.finish_drain();
  } else {  // the mesh failed: no server can finish a session
    S.stopping = true;
    I.liveness.cut_short();
    // A session waiting in the batches for a step that no lane will run
    // now would wait for ever (and this server never exit to be restarted).
    I.batcher.end_all(S.mesh_lost_why.empty() ? "the service stopped" : S.mesh_lost_why);
  }
  S.stopping = true;
  while (I.sessions.active() > 0) co_await S.changed.wait();
  // The background loops wait on the mesh: ending it ends them (and tells
  // the other servers, which stop too: the service needs all three).
  S.mesh.cancel(S.mesh_lost_why.empty() ? "server " + std::to_string(S.id()) + " stopped"
                                        : "server " + std::to_string(S.id()) + " lost its mesh (" + S.mesh_lost_why + ")");
  S.changed.notify();         // the leader's batch planner sees the end
  I.liveness.close_links();  // clients still connected without a session
  co_await S.tasks.idle();
  I.batcher.close_lanes();
  S.stats.offline = I.batcher.offline_costs();
  S.stats.truncations_with_pairs = S.party->truncation_stats().from_pairs;
  S.stats.truncations_in_two_rounds = S.party->truncation_stats().two_round;
  S.stats.comparisons_from_store = S.party->dcf_stats().from_store;
  S.stats.comparisons_inline = S.party->dcf_stats().inline_elements;
  S.stats.store_ran_dry = S.party->dcf_stats().ran_dry;
  S.stats.drained = S.drain_complete;
  S.stats.stop_asked_by = S.stop_asked_by;
  S.log("stopped: " + std::to_string(S.stats.sessions_done) + " sessions done, " +
        std::to_string(S.stats.sessions_failed) + " failed, " + std::to_string(S.stats.refused) + " refused");
  // Another server's orderly stop is ours too; a broken link is an error.
  const std::string& why = S.mesh_lost_why;
  if (!why.empty() && (!why.starts_with(to_string(ErrorCode::cancelled)) || why.find("lost its mesh") != std::string::npos))
    throw Error(ErrorCode::network, "the service lost its mesh: " + why);
  co_return S.stats;
}

}  // namespace mpcache::serve
