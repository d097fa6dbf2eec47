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
    if (!s_.drain_complete && s_.mesh_lost_why.empty()) s_.mesh_lost_why = e.what();
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
    if (s_.stop.stop_requested() && !s_.stop_asked) {
      s_.stop_asked = true;
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

// The mesh failed (no drain can be agreed): requests waiting are refused,
// and, as no step can finish without the lost server, every wait on the
// mesh ends now: a step's children that wait on each other, not on the
// lost server (when_all lets a failed child's siblings run on), would
// otherwise wait while the heartbeats keep their links alive. Sessions
// still in flight get drain_within, then their scopes are cancelled here.
void Liveness::cut_short() {
  s_.log("stopping: refusing new requests, " + std::to_string(sessions_.active()) + " sessions in flight");
  admission_.refuse_waiting(shutting_down);
  if (s_.mesh_lost && !s_.mesh.cancelled())
    s_.mesh.cancel("server " + std::to_string(s_.id()) + " lost its mesh (" + s_.mesh_lost_why + ")");
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + s_.options.drain_within, [this, guard] {
    if (guard.expired()) return;
    for (auto [session, scope] : sessions_.scopes())
      s_.mesh.cancel_scope(scope, "session " + std::to_string(session) + ": server " + std::to_string(s_.id()) +
                                      " shut down before it finished");
    s_.changed.notify();
  });
}

void Liveness::admitted(std::uint64_t session) { ended_at_[session] = 0; }

void Liveness::session_ended(std::uint64_t session) {
  if (s_.id() != leader) {
    if (!s_.mesh.cancelled()) s_.mesh.send(leader, drain_stream, DrainNote{DrainKind::session_ended, session}.encode());
    return;
  }
  if (auto it = ended_at_.find(session); it != ended_at_.end() && (it->second |= 1u) == 7u) ended_at_.erase(it);
  s_.changed.notify();
}

Task<void> Liveness::hear_drain(PartyId peer) {
  for (;;) {
    DrainNote d;
    try {
      d = DrainNote::decode(co_await s_.mesh.recv_idle(peer, drain_stream));
    } catch (const Error&) {
      co_return;  // the mesh is gone or cancelled (or garbled): run() reports it
    }
    if (s_.id() == leader) {
      if (d.kind == DrainKind::stop_asked) {
        s_.log("server " + std::to_string(peer) + " was asked to stop: the service drains");
        begin_drain(peer);
      } else if (d.kind == DrainKind::session_ended) {
        if (auto it = ended_at_.find(d.session); it != ended_at_.end() && (it->second |= 1u << peer) == 7u)
          ended_at_.erase(it);
      } else if (d.kind == DrainKind::bye) {
        byes_ |= 1u << peer;
      }
    } else if (d.kind == DrainKind::complete && !s_.drain_complete) {
      s_.stop_asked_by = d.asked_by;
      s_.drain_complete = true;
      s_.stopping = true;
      admission_.refuse_waiting(shutting_down);  // requests server 0 never saw
    }
    s_.changed.notify();
  }
}

// Leader: no more admissions; the queue is refused everywhere; the sessions
// in flight get drain_within, then their scopes are cancelled, which ends
// them at every server (a decoding one leaves the batches between steps).
void Liveness::begin_drain(PartyId asked_by) {
  if (s_.stopping) return;
  s_.stopping = true;
  s_.stop_asked_by = asked_by;
  s_.log("draining (server " + std::to_string(asked_by) + " was asked to stop): refusing new requests, " +
         std::to_string(ended_at_.size()) + " sessions in flight");
  admission_.refuse_waiting(shutting_down);
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + s_.options.drain_within, [this, guard] {
    if (guard.expired() || s_.drain_complete) return;
    for (auto [session, scope] : sessions_.scopes())
      s_.mesh.cancel_scope(scope, "session " + std::to_string(session) + ": the service shut down (drain of " +
                                      std::to_string(s_.options.drain_within.count()) + " ms over) before it finished");
    s_.changed.notify();
  });
  s_.changed.notify();
}

bool Liveness::drain_step() {
  if (s_.stop_asked && s_.id() == leader) begin_drain(leader);
  if (s_.stop_asked && s_.id() != leader && !told_leader_) {
    told_leader_ = true;
    s_.log("asked to stop: telling server 0, which drains the service");
    s_.mesh.send(leader, drain_stream, DrainNote{DrainKind::stop_asked, 0}.encode());
  }
  if (s_.id() == leader && s_.stopping && !s_.drain_complete && ended_at_.empty()) {
    s_.drain_complete = true;
    s_.log("drain complete: every session admitted has ended at all three servers");
    DrainNote c{DrainKind::complete, 0, static_cast<std::uint8_t>(s_.stop_asked_by)};
    for (PartyId peer = 1; peer < 3; ++peer) s_.mesh.send(peer, drain_stream, c.encode());
  }
  return s_.drain_complete;
}

// Servers 1 and 2 say bye and wait for the leader to close the mesh; the
// leader waits for both byes. A dead peer ends the wait (the mesh fails),
// a silent one after bye_within.
Task<void> Liveness::finish_drain() {
  if (s_.id() != leader) s_.mesh.send(leader, drain_stream, DrainNote{DrainKind::bye, 0}.encode());
  auto waited = make_shared<bool>(false);
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + bye_within, [this, guard, waited] {
    if (guard.expired()) return;
    *waited = true;
    s_.changed.notify();
  });
  const auto over = [&] {
    return *waited || s_.mesh_lost || s_.mesh.cancelled() || (s_.id() == leader && byes_ == 6u);
  };
  while (!over()) co_await s_.changed.wait();
  if (*waited) s_.log("drain: no word from the other servers within " + std::to_string(bye_within.count()) + " ms");
}

}  // namespace mpcache::serve
