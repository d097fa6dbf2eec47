// Liveness (modules/serve/server_parts.cppm): a dead or silent party must
// end what depends on it within a bounded time, never hang it. Servers beat
// to each other (a server that stops hearing one stops too: the service
// needs all three) and to every client (whose silence deadline then tells a
// dead server from a busy one); a client that goes quiet loses its session;
// at a stop the sessions in flight get drain_within to finish.
module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;

namespace mpcache::serve {

void Liveness::keep(std::shared_ptr<ClientLink> link) {
  std::erase_if(links_, [](const std::weak_ptr<ClientLink>& l) { return l.expired(); });
  links_.push_back(std::move(link));
}

void Liveness::close_links() {
  for (auto& weak : links_)
    if (auto link = weak.lock()) link->close();
  links_.clear();
}

// Ends when the mesh does (a server stopped or died): run() then stops too.
Task<void> Liveness::hear_heartbeats(PartyId peer) {
  try {
    for (;;) (void)co_await s_.mesh.recv_idle(peer, heartbeat_stream);
  } catch (const Error& e) {
    if (!s_.stopping && s_.mesh_lost_why.empty()) s_.mesh_lost_why = e.what();
  }
  s_.mesh_lost = true;
  s_.changed.notify();
}

void Liveness::beat() {
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + s_.options.heartbeat_every, [this, guard] {
    if (guard.expired()) return;
    if (s_.mesh.cancelled()) {  // another server stopped: so does this one
      s_.changed.notify();
      return;
    }
    for (PartyId peer = 0; peer < 3; ++peer)
      if (peer != s_.id()) s_.mesh.send(peer, heartbeat_stream, std::vector<std::byte>{});
    if (s_.stop.stop_requested() && !s_.stopping) {
      s_.stopping = true;
      s_.changed.notify();
    }
    beat();
  });
}

// An empty frame on heartbeat_stream to every client link, each
// heartbeat_every: a client whose request waits in the queue or in a long
// prefill then still hears from every server, so its silence deadline
// tells a dead server from a busy one. The client never awaits them.
void Liveness::beat_clients() {
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + s_.options.heartbeat_every, [this, guard] {
    if (guard.expired()) return;
    for (auto& weak : links_)
      if (auto link = weak.lock(); link && !link->closed)
        link->endpoint->send(link->client_peer, heartbeat_stream, std::vector<std::byte>{});
    beat_clients();
  });
}

// Unless `done` is set within `limit`, tells the client "<what> within N
// ms" as its session's failure and closes its channel: the wait on it then
// fails with that reason. (The transport's own silence deadline, longer,
// would close the channel without a word.)
void Liveness::fail_unless_by(const std::shared_ptr<ClientLink>& link, std::shared_ptr<bool> done,
                              std::chrono::milliseconds limit, const std::string& what) {
  std::weak_ptr<bool> guard = s_.alive;
  std::weak_ptr<ClientLink> weak = link;
  s_.timers.at(SteadyClock::now() + limit, [this, guard, weak, done, limit, what] {
    auto l = weak.lock();
    if (guard.expired() || *done || !l || l->closed) return;
    const std::string why = "client " + l->name + " " + what + " within " + std::to_string(limit.count()) + " ms";
    // Logged here: the client, told why, may close its connections before
    // the session's own failure names the reason (it then says "closed").
    s_.log("dropping " + why);
    l->reply(Reply::text(ReplyKind::failed, why));
    l->close(why);
  });
}

// Ends the session's scope when its client goes away first.
Task<void> Liveness::watch_client(std::uint64_t session, std::shared_ptr<ClientLink> link) {
  std::string why;
  try {
    (void)co_await link->endpoint->recv_idle(link->client_peer, goodbye_stream);
    why = "sent data after its request";
  } catch (const Error& e) {
    why = e.what();
  }
  if (sessions_.running(session) && !link->closed) {
    s_.mesh.cancel_scope(scope_of(session), "session " + std::to_string(session) + ": client " + link->name +
                                                " went away (" + why + ")");
    s_.changed.notify();  // a decoding session leaves the batches
  }
}

// New requests are refused at once; sessions in flight may finish within
// drain_within, then their scopes are cancelled at this server.
void Liveness::drain() {
  s_.log("stopping: refusing new requests, " + std::to_string(sessions_.active()) + " sessions in flight");
  admission_.refuse_waiting("shutting down");
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + s_.options.drain_within, [this, guard] {
    if (guard.expired()) return;
    for (auto [session, scope] : sessions_.scopes())
      s_.mesh.cancel_scope(scope, "session " + std::to_string(session) + ": server " + std::to_string(s_.id()) +
                                      " shut down before it finished");
    s_.changed.notify();
  });
}

}  // namespace mpcache::serve
