module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import mpcache.model;

namespace mpcache::serve {

namespace {
constexpr PartyId leader = 0;
// A bound on the lanes a leader may ask for, so that a garbled step cannot
// make a server open streams without end.
constexpr std::size_t max_lanes = 64;

ScopeId scope_of(std::uint64_t session) { return static_cast<ScopeId>(1 + session % max_scope); }
}  // namespace

std::uint64_t session_kv_bytes(const ModelConfig& c, std::uint64_t positions) {
  return 2 * c.num_layers * c.num_kv_heads * c.head_dim * positions * 2 * sizeof(Ring);
}

// One client's channel at this server: an endpoint on the server's loop
// where the client is party `client_peer` (over TCP: a two-party endpoint,
// this server 0 and the client 1, with its own transport).
struct ClientLink {
  std::string name;
  Endpoint* endpoint = nullptr;
  PartyId client_peer = 1;
  std::unique_ptr<Endpoint> owned_endpoint;  // TCP: the link's own
  std::unique_ptr<TcpTransport> transport;   // TCP: the link's own
  bool closed = false;

  void reply(const Reply& r) {
    if (!closed) endpoint->send(client_peer, reply_stream, r.encode());
  }
  // Hands what is queued to the socket, closes, and wakes whatever waits on
  // the client (its watcher) with a network error naming `why`.
  void close(const std::string& why = "closed by the server") {
    if (closed) return;
    closed = true;
    endpoint->on_tick_end();
    if (transport) transport->shutdown();
    endpoint->fail(client_peer, why);
  }
};

struct Request {
  std::shared_ptr<ClientLink> link;
  ServeRequest request;
  std::vector<std::byte> bytes;  // as received
};

// A session in its decode phase at this server, as the batched steps run it.
struct Sequence {
  std::uint64_t session = 0;
  std::shared_ptr<Request> request;
  std::unique_ptr<Decoder<Rss3>> decoder;
  std::unique_ptr<kv::AnyPolicy<Rss3>> policy;
  Rss3Share row;                // its last chosen token (one-hot), the next step's input
  bool stop_test_due = false;   // row's stop test is opened alongside the next step
  std::size_t chosen = 0;       // tokens chosen so far
  std::uint64_t last_step = 0;  // the batched step it last ran in (fair turns)
  bool ended = false;
  std::string failure;          // why it ended early; "" once done
};

struct Server::Impl {
  Scheduler& scheduler;
  Endpoint& mesh;
  OwnedTimers timers;  // cancelled with us: the transport's shutdown waits for its queue to empty
  ServeOptions options;
  ModelConfig config;
  std::unique_ptr<Rss3Party> party;
  std::optional<DecoderWeights<Rss3>> weights;
  TaskGroup tasks;
  Signal changed;
  std::shared_ptr<bool> alive = make_shared<bool>(true);  // timers check it: they may outlive us
  bool is_ready = false, stopping = false;
  bool mesh_lost = false;    // a link of the mesh failed or was cancelled: the service is over
  std::string mesh_lost_why;  // when that happened before a stop of ours
  std::stop_token stop;
  ServeStats stats;
  std::uint64_t next_session = 0;   // leader
  std::uint64_t next_link = 0;
  std::size_t active = 0;
  std::uint64_t kv_in_use = 0;
  std::deque<std::shared_ptr<Request>> queue;                    // leader: admitted later
  std::map<Nonce, std::shared_ptr<Request>> waiting_for_leader;  // others: requests not yet announced
  std::map<Nonce, Announcement> waiting_for_client;              // others: announcements before their request
  std::map<std::uint64_t, ScopeId> running;                      // session -> scope
  std::vector<std::weak_ptr<ClientLink>> links;                   // every client link, to close them at the end
  // Batched decoding (max_batch > 1).
  std::map<std::uint64_t, std::shared_ptr<Sequence>> decoding;    // joined here, not yet ended
  std::map<std::uint64_t, unsigned> followers_joined;             // leader: session -> servers 1, 2 that joined (bits)
  std::vector<std::pair<std::uint64_t, std::string>> departing;   // leader: sessions to leave, told with the next step
  std::map<std::uint64_t, std::string> left_early;                // others: left before they joined here
  std::uint64_t steps_run = 0;
  StoreRefill store_refill{options.refill_steps_ahead};  // DCF keys and truncation pairs, offline
  // Each lane's stream, the same from step to step, so that a refill
  // reserves truncation pairs for the calls the next step repeats
  // (Rss3TruncationPlan keys derive from the stream). Opened in lane order
  // when a lane is first used, so the servers' stream ids agree; a deque,
  // so that opening one does not move another a step is using.
  std::deque<Rss3> lane_streams;
  std::vector<bool> lane_busy;         // a step of that lane runs here
  std::set<std::uint64_t> stepping;    // sessions in a running step here

  Impl(Scheduler& s, Endpoint& m, TimerQueue& t, ServeOptions o)
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

  PartyId id() const { return mesh.id(); }
  void log(const std::string& line) const {
    if (options.log) options.log("server " + std::to_string(mesh.id()) + ": " + line);
  }

  // ---- requests -------------------------------------------------------------

  std::string check(const ServeRequest& q) const {
    if (q.prompt_length == 0) return "an empty prompt";
    if (q.new_tokens == 0) return "zero new tokens";
    if (q.new_tokens > options.max_new_tokens)
      return std::to_string(q.new_tokens) + " new tokens (this service allows at most " +
             std::to_string(options.max_new_tokens) + ")";
    if (q.prompt_length + q.new_tokens > config.max_positions)
      return "prompt (" + std::to_string(q.prompt_length) + ") + new tokens (" + std::to_string(q.new_tokens) +
             ") exceed the model's " + std::to_string(config.max_positions) + " positions";
    for (auto t : q.stop_tokens)
      if (t >= config.vocab_size)
        return "stop token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(config.vocab_size);
    try {
      (void)kv::make_policy<Rss3>(q.policy, q.budget == 0 ? kv::default_budget(q.policy) : q.budget);
    } catch (const Error& e) {
      return e.what();
    }
    if (session_kv_bytes(config, q.prompt_length + q.new_tokens) > options.kv_bytes_limit)
      return "its KV cache (" + std::to_string(session_kv_bytes(config, q.prompt_length + q.new_tokens)) +
             " bytes) exceeds this service's limit of " + std::to_string(options.kv_bytes_limit);
    return {};
  }

  void refuse(Request& r, const std::string& why) {
    ++stats.refused;
    log("refused " + r.link->name + ": " + why);
    r.link->reply(Reply::text(ReplyKind::refused, why));
    r.link->close();
  }

  // Leader: refuses here and tells the others why.
  void refuse_everywhere(Request& r, const std::string& why) {
    Announcement a;
    a.nonce = r.request.nonce;
    a.why = why;
    for (PartyId peer = 1; peer < 3; ++peer) mesh.send(peer, announce_stream, a.encode());
    refuse(r, why);
  }

  bool has_room(const ServeRequest& q) const {
    return active < options.max_sessions &&
           kv_in_use + session_kv_bytes(config, q.prompt_length + q.new_tokens) <= options.kv_bytes_limit;
  }

  void consider(const std::shared_ptr<Request>& r) {  // leader
    if (const std::string why = check(r->request); !why.empty()) return refuse_everywhere(*r, "bad request: " + why);
    if (has_room(r->request) && queue.empty()) return start_as_leader(r);
    if (queue.size() >= options.max_queued)
      return refuse_everywhere(*r, "busy: " + std::to_string(active) + " sessions running and " +
                                       std::to_string(queue.size()) + " queued; try again later");
    log("queued " + r->link->name + " (" + std::to_string(queue.size() + 1) + " waiting)");
    queue.push_back(r);
  }

  void start_queued() {  // leader
    while (!queue.empty() && !stopping && has_room(queue.front()->request)) {
      auto r = queue.front();
      queue.pop_front();
      if (r->link->closed) continue;
      start_as_leader(r);
    }
  }

  void start_as_leader(const std::shared_ptr<Request>& r) {
    Announcement a;
    a.admitted = true;
    a.session = next_session++;
    a.nonce = r->request.nonce;
    a.request = r->bytes;
    for (PartyId peer = 1; peer < 3; ++peer) mesh.send(peer, announce_stream, a.encode());
    launch(a.session, r);
  }

  // Others: the leader's word and the client's request, whichever came second.
  void match(const Announcement& a, const std::shared_ptr<Request>& r) {
    if (!a.admitted) return refuse(*r, a.why);
    if (a.request != r->bytes) {
      const std::string why = "the request " + r->link->name + " sent server " + std::to_string(id()) +
                              " differs from the one server 0 admitted";
      mesh.cancel_scope(scope_of(a.session), "session " + std::to_string(a.session) + ": " + why);
      return refuse(*r, why);
    }
    launch(a.session, r);
  }

  Task<void> read_request(std::shared_ptr<ClientLink> link) {
    std::shared_ptr<Request> r;
    try {
      auto bytes = co_await link->endpoint->recv(link->client_peer, request_stream);
      r = make_shared<Request>(Request{link, ServeRequest::decode(bytes), std::move(bytes)});
    } catch (const Error& e) {
      log("dropped " + link->name + ": " + e.what());
      link->reply(Reply::text(ReplyKind::refused, std::string("malformed request: ") + e.what()));
      link->close();
      co_return;
    }
    // A client that came while the model was being shared waits for it.
    while (!is_ready && !stopping) co_await changed.wait();
    if (stopping || link->closed) co_return refuse(*r, "shutting down");
    if (id() == leader) co_return consider(r);
    const Nonce nonce = r->request.nonce;
    if (auto it = waiting_for_client.find(nonce); it != waiting_for_client.end()) {
      const Announcement a = std::move(it->second);
      waiting_for_client.erase(it);
      co_return match(a, r);
    }
    waiting_for_leader[nonce] = r;
    std::weak_ptr<bool> guard = alive;
    timers.at(SteadyClock::now() + options.match_within, [this, guard, nonce] {
      if (guard.expired()) return;
      auto it = waiting_for_leader.find(nonce);
      if (it == waiting_for_leader.end()) return;
      auto late = it->second;
      waiting_for_leader.erase(it);
      refuse(*late, "server 0 did not admit this request within " + std::to_string(options.match_within.count()) +
                        " ms (did the client reach it?)");
    });
  }

  Task<void> hear_announcements() {  // servers 1 and 2
    for (;;) {
      std::vector<std::byte> bytes;
      try {
        bytes = co_await mesh.recv_idle(leader, announce_stream);
      } catch (const Error&) {
        co_return;  // the mesh is gone or cancelled: run() reports it
      }
      const Announcement a = Announcement::decode(bytes);
      if (auto it = waiting_for_leader.find(a.nonce); it != waiting_for_leader.end()) {
        auto r = it->second;
        waiting_for_leader.erase(it);
        match(a, r);
        continue;
      }
      if (stopping && a.admitted) {
        mesh.cancel_scope(scope_of(a.session), "session " + std::to_string(a.session) + ": server " +
                                                   std::to_string(id()) + " is shutting down");
        continue;
      }
      waiting_for_client[a.nonce] = a;
      std::weak_ptr<bool> guard = alive;
      timers.at(SteadyClock::now() + options.match_within, [this, guard, a] {
        if (guard.expired()) return;
        auto it = waiting_for_client.find(a.nonce);
        if (it == waiting_for_client.end()) return;
        waiting_for_client.erase(it);
        if (a.admitted)
          mesh.cancel_scope(scope_of(a.session), "session " + std::to_string(a.session) + ": its request never reached server " +
                                                     std::to_string(id()));
      });
    }
  }

  // ---- sessions -------------------------------------------------------------

  void launch(std::uint64_t session, const std::shared_ptr<Request>& r) {
    const ScopeId scope = scope_of(session);
    mesh.open_scope(scope);
    mesh.open_scope(scope_of(session + max_scope / 2));  // a cancellation is forgotten long before its scope returns
    ++active;
    kv_in_use += session_kv_bytes(config, r->request.prompt_length + r->request.new_tokens);
    running[session] = scope;
    log("session " + std::to_string(session) + " for " + r->link->name + ": " + std::to_string(r->request.prompt_length) +
        " prompt tokens, up to " + std::to_string(r->request.new_tokens) + " new, policy " + r->request.policy);
    tasks.spawn(run_session(session, r));
    tasks.spawn(watch_client(session, r->link));
  }

  // Unless `done` is set within `limit`, tells the client "<what> within N
  // ms" as its session's failure and closes its channel: the wait on it then
  // fails with that reason. (The transport's own silence deadline, longer,
  // would close the channel without a word.)
  void fail_unless_by(const std::shared_ptr<ClientLink>& link, std::shared_ptr<bool> done,
                      std::chrono::milliseconds limit, const std::string& what) {
    std::weak_ptr<bool> guard = alive;
    std::weak_ptr<ClientLink> weak = link;
    timers.at(SteadyClock::now() + limit, [this, guard, weak, done, limit, what] {
      auto l = weak.lock();
      if (guard.expired() || *done || !l || l->closed) return;
      const std::string why = "client " + l->name + " " + what + " within " + std::to_string(limit.count()) + " ms";
      // Logged here: the client, told why, may close its connections before
      // the session's own failure names the reason (it then says "closed").
      log("dropping " + why);
      l->reply(Reply::text(ReplyKind::failed, why));
      l->close(why);
    });
  }

  // Ends the session's scope when its client goes away first.
  Task<void> watch_client(std::uint64_t session, std::shared_ptr<ClientLink> link) {
    std::string why;
    try {
      (void)co_await link->endpoint->recv_idle(link->client_peer, goodbye_stream);
      why = "sent data after its request";
    } catch (const Error& e) {
      why = e.what();
    }
    if (running.contains(session) && !link->closed) {
      mesh.cancel_scope(scope_of(session), "session " + std::to_string(session) + ": client " + link->name +
                                               " went away (" + why + ")");
      changed.notify();  // a decoding session leaves the batches
    }
  }

  Task<void> run_session(std::uint64_t session, std::shared_ptr<Request> r) {
    ClientLink& link = *r->link;
    std::size_t chosen = 0;
    bool joined = false;
    std::string failure;
    const auto t0 = SteadyClock::now();
    try {
      send_accepted(link, session);
      co_await generate_tokens(session, r, chosen, joined);
    } catch (const Error& e) {
      failure = e.what();
    }
    if (batching() && !joined && !failure.empty()) {  // servers that joined it must let it go
      const std::string why = "session " + std::to_string(session) + " failed at server " + std::to_string(id()) + ": " + failure;
      if (id() == leader) {
        departing.emplace_back(session, why);
        changed.notify();
      } else {
        mesh.send(leader, batch_ready_stream, BatchReady{session, false, failure}.encode());
      }
    }
    running.erase(session);
    left_early.erase(session);
    if (failure.empty()) {
      ++stats.sessions_done;
      link.reply(Reply::number(ReplyKind::done, chosen));
      log("session " + std::to_string(session) + " done: " + std::to_string(chosen) + " tokens in " +
          std::to_string(std::chrono::duration<double>(SteadyClock::now() - t0).count()) + " s");
    } else {
      ++stats.sessions_failed;
      if (mesh.scope_cancelled(scope_of(session)).empty() && !mesh.cancelled())
        mesh.cancel_scope(scope_of(session), "session " + std::to_string(session) + " failed at server " +
                                                 std::to_string(id()) + ": " + failure);
      link.reply(Reply::text(ReplyKind::failed, failure));
      log("session " + std::to_string(session) + " failed: " + failure);
    }
    link.close();
    --active;
    kv_in_use -= session_kv_bytes(config, r->request.prompt_length + r->request.new_tokens);
    if (id() == leader) start_queued();
    changed.notify();
  }

  void send_accepted(ClientLink& link, std::uint64_t session) {
    std::vector<std::byte> body = Reply::number(ReplyKind::accepted, session).body;
    const auto vocab = Reply::number(ReplyKind::accepted, config.vocab_size).body;
    body.insert(body.end(), vocab.begin(), vocab.end());
    link.reply(Reply{ReplyKind::accepted, std::move(body)});
  }

  // The session's MPC: the client's one-hot prompt, the prefill, then each
  // chosen token's secret one-hot row into the next step: here, or in the
  // batched steps (`joined` once it is there).
  Task<void> generate_tokens(std::uint64_t session, std::shared_ptr<Request> r, std::size_t& chosen, bool& joined) {
    ClientLink& link = *r->link;
    const ServeRequest& q = r->request;
    Rss3 p = party->scoped_session(session);
    // Truncation pairs are the batched steps' alone: this session's streams
    // run while those steps' refills make pairs (needing a quiet point), and
    // a prefill's truncations grow with the prompt, as its comparisons do.
    p.without_truncation_pairs(true);
    const std::size_t vocab = config.vocab_size;
    auto prompt_came = make_shared<bool>(false);
    fail_unless_by(r->link, prompt_came, options.prompt_within, "sent no prompt shares");
    const auto prompt = co_await link.endpoint->recv(link.client_peer, prompt_stream);
    *prompt_came = true;
    const Rss3Share hot = client_shares::assemble(id(), prompt, {q.prompt_length, vocab});
    auto seq = make_shared<Sequence>();
    seq->session = session;
    seq->request = r;
    // Only the last position's logits choose the first token (chosen_row),
    // so the prefill computes no others, as generate's does.
    seq->decoder = std::make_unique<Decoder<Rss3>>(
        *weights, DecoderOptions{default_prefill_memory_budget, PrefillLogits::last});
    seq->policy = std::make_unique<kv::AnyPolicy<Rss3>>(
        kv::make_policy<Rss3>(q.policy, q.budget == 0 ? kv::default_budget(q.policy) : q.budget));
    Decoder<Rss3>& decoder = *seq->decoder;
    auto& policy = *seq->policy;
    // Under DCF comparisons this session's prefill and its token choice
    // compare on the circuit, as generate_party's do: no store holds their
    // keys, and dealt inline they would cost gigabytes per prompt. The
    // other sessions keep their own mode (Rss3::compare_on_circuit is per
    // stream); the decode steps compare with DCF keys.
    const bool prefill_on_circuit = p.dcf_comparisons();
    if (prefill_on_circuit) p.compare_on_circuit(true);
    auto logits = co_await decoder.prefill_one_hot(p, policy, hot);
    if (batching()) {  // the first token here, the others in the batched steps
      seq->row = co_await chosen_row(p, logits);
      if (prefill_on_circuit) p.compare_on_circuit(false);
      send_token(*seq);
      chosen = seq->chosen;
      if (q.new_tokens == 1) co_return;
      seq->stop_test_due = !q.stop_tokens.empty();
      joined = true;
      co_await join_batches(seq);
      chosen = seq->chosen;
      if (!seq->failure.empty()) throw Error(ErrorCode::cancelled, seq->failure);
      co_return;
    }
    for (std::size_t step = 0; step < q.new_tokens; ++step) {
      seq->row = co_await chosen_row(p, logits);
      if (step == 0 && prefill_on_circuit) p.compare_on_circuit(false);
      send_token(*seq);
      chosen = seq->chosen;
      if (step + 1 == q.new_tokens) break;
      if (q.stop_tokens.empty()) {
        logits = co_await decoder.decode_one_hot(p, policy, seq->row);
        continue;
      }
      // Whether the token is a stop token, opened to the servers while the
      // next step runs.
      Rss3 pa = p.fork(), pb = p.fork();
      auto [next_logits, hit] =
          co_await when_all(decoder.decode_one_hot(pa, policy, seq->row), pb.reveal(stop_test(*seq)));
      if (hit(0, 0) != 0) break;
      logits = std::move(next_logits);
    }
  }

  // The chosen token's index to the client (this server's part of it).
  void send_token(Sequence& seq) {
    seq.request->link->reply(Reply{ReplyKind::token, client_shares::open_part(ops::one_hot_index<Rss3>(seq.row))});
    if (options.on_step) {
      const OfflineCosts offline = store_refill.costs();
      options.on_step({id(), seq.session, seq.chosen, mesh.rounds() - offline.rounds,
                       mesh.costs().payload_bytes_sent() - offline.bytes, offline, party->dcf_stats().inline_elements});
    }
    ++seq.chosen;
  }

  // Whether the last chosen token is a stop token, still secret (1, 1): the
  // sum of its one-hot entries at the stop ids.
  static Rss3Share stop_test(const Sequence& seq) {
    return Rss3::apply(seq.row, [&](const RingTensor& t) {
      RingTensor s = ring_zeros({1, 1});
      for (auto id : seq.request->request.stop_tokens) s(0, 0) += t(0, id);
      return s;
    });
  }

  // ---- batched decoding -----------------------------------------------------

  bool batching() const { return options.max_batch > 1; }

  // A session whose prefill is done here waits in the batches until it ends.
  // Servers 1 and 2 tell the leader, which plans a session's steps only once
  // all three have it.
  Task<void> join_batches(std::shared_ptr<Sequence> seq) {
    const std::uint64_t session = seq->session;
    if (auto it = left_early.find(session); it != left_early.end()) {
      seq->ended = true;
      seq->failure = it->second;
      left_early.erase(it);
      co_return;
    }
    if (id() != leader) mesh.send(leader, batch_ready_stream, BatchReady{session, true, {}}.encode());
    decoding[session] = seq;
    changed.notify();
    while (!seq->ended) co_await changed.wait();
  }

  // A session leaves the batches: now if it is in them, or when it comes.
  void leave(std::uint64_t session, const std::string& why) {
    if (auto it = decoding.find(session); it != decoding.end()) return end_sequence(*it->second, why);
    if (running.contains(session)) left_early[session] = why;
  }

  void end_sequence(Sequence& seq, const std::string& failure) {
    seq.ended = true;
    seq.failure = failure;
    decoding.erase(seq.session);
    followers_joined.erase(seq.session);
    changed.notify();
  }

  // The leader's lanes: the servers' limit, but one under an offline store,
  // whose refills need a point where no step runs.
  std::size_t lanes() const {
    const bool store = options.rss3.offline_budget > 0 || options.rss3.truncation_pairs_budget > 0;
    return store ? 1 : options.decode_lanes;
  }

  // Leader: the sessions all three servers have and no step runs, least
  // recently stepped first, at most max_batch and at most this lane's even
  // share of all of them (so that every lane has work).
  std::vector<std::uint64_t> next_batch() const {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> order;  // (last step, session)
    std::size_t joined = 0;
    for (const auto& [session, seq] : decoding)
      if (auto it = followers_joined.find(session); it != followers_joined.end() && it->second == 0b11) {
        ++joined;
        if (!stepping.contains(session)) order.emplace_back(seq->last_step, session);
      }
    std::sort(order.begin(), order.end());
    const std::size_t share = std::min(options.max_batch, (joined + lanes() - 1) / lanes());
    std::vector<std::uint64_t> batch;
    for (std::size_t i = 0; i < order.size() && i < share; ++i) batch.push_back(order[i].second);
    return batch;
  }

  // Leader: departures that can be told now. A session in a running step
  // leaves after it, so that no step loses a row it is computing.
  bool departures_ready() const {
    return std::ranges::any_of(departing, [&](const auto& d) { return !stepping.contains(d.first); });
  }

  Task<void> lead_lane(std::size_t lane) {
    for (;;) {
      while (!mesh.cancelled() && !departures_ready() && next_batch().empty()) co_await changed.wait();
      if (mesh.cancelled()) co_return;
      for (const auto& [session, seq] : decoding)  // clients gone, sessions cut by a drain
        if (auto why = mesh.scope_cancelled(scope_of(session));
            !why.empty() && !std::ranges::any_of(departing, [&](const auto& d) { return d.first == session; }))
          departing.emplace_back(session, why);
      BatchStep step;
      step.lane = lane;
      std::erase_if(departing, [&](auto& d) {
        if (stepping.contains(d.first)) return false;
        step.departures.push_back(std::move(d));
        return true;
      });
      for (const auto& [session, why] : step.departures) leave(session, why);
      step.sessions = next_batch();
      if (step.sessions.empty() && step.departures.empty()) continue;
      if (!step.sessions.empty()) begin_step(lane, step.sessions);
      for (PartyId peer = 1; peer < 3; ++peer) mesh.send(peer, batch_stream, step.encode());
      if (!step.sessions.empty()) co_await run_lane_step(lane, step.sessions);
    }
  }

  Task<void> follow_batches() {  // servers 1 and 2
    for (;;) {
      std::vector<std::byte> bytes;
      try {
        bytes = co_await mesh.recv_idle(leader, batch_stream);
      } catch (const Error&) {
        co_return;  // the mesh is gone or cancelled: run() reports it
      }
      BatchStep step;
      try {
        step = BatchStep::decode(bytes);
      } catch (const Error& e) {
        co_return lose_mesh(e.what());
      }
      if (step.lane >= max_lanes)
        co_return lose_mesh("server 0 planned a decode step in lane " + std::to_string(step.lane) + ", past the " +
                            std::to_string(max_lanes) + " lanes a server may run");
      // The leader starts a step once the lane's last one and the steps of
      // the sessions it names have ended there; here they may still run.
      const auto in_step = [&](std::uint64_t session) { return stepping.contains(session); };
      const auto waits = [&] {
        return (step.lane < lane_busy.size() && lane_busy[step.lane]) || std::ranges::any_of(step.sessions, in_step) ||
               std::ranges::any_of(step.departures, [&](const auto& d) { return in_step(d.first); });
      };
      while (!mesh_lost && !mesh.cancelled() && waits()) co_await changed.wait();
      if (mesh_lost || mesh.cancelled()) co_return;
      for (const auto& [session, why] : step.departures) leave(session, why);
      if (step.sessions.empty()) continue;
      begin_step(step.lane, step.sessions);
      tasks.spawn(run_lane_step(step.lane, std::move(step.sessions)));
    }
  }

  // Marks a lane's step as running (at once, before any other message is
  // read), opening the lane's stream, and those before it, at its first use.
  void begin_step(std::uint64_t lane, const std::vector<std::uint64_t>& sessions) {
    while (lane_streams.size() <= lane) lane_streams.push_back(party->session());
    lane_busy.resize(lane_streams.size(), false);
    lane_busy[lane] = true;
    stepping.insert(sessions.begin(), sessions.end());
  }

  Task<void> run_lane_step(std::uint64_t lane, std::vector<std::uint64_t> sessions) {
    std::exception_ptr failed;  // run_step handles Errors; anything else still frees the lane
    try {
      co_await run_step(lane_streams[lane], sessions);
    } catch (...) {
      failed = std::current_exception();
    }
    lane_busy[lane] = false;
    for (auto session : sessions) stepping.erase(session);
    changed.notify();
    if (failed) std::rethrow_exception(failed);
  }

  // Leader: what servers 1 and 2 say of each session's prefill.
  Task<void> hear_batch_ready(PartyId peer) {
    for (;;) {
      BatchReady b;
      try {
        b = BatchReady::decode(co_await mesh.recv_idle(peer, batch_ready_stream));
      } catch (const Error&) {
        co_return;
      }
      if (!running.contains(b.session)) continue;  // it ended here already
      if (b.joined) {
        followers_joined[b.session] |= 1u << (peer - 1);
      } else {
        const std::string why = "session " + std::to_string(b.session) + " failed at server " + std::to_string(peer) + ": " + b.why;
        departing.emplace_back(b.session, why);
      }
      changed.notify();
    }
  }

  // One batched decode step of `sessions` (rows in that order), the same at
  // every server: the stop tests due ride along, then one argmax for the
  // sessions that go on, and each one's token to its client.
  Task<void> run_step(Rss3& p, const std::vector<std::uint64_t>& sessions) {
    std::vector<std::shared_ptr<Sequence>> batch;
    for (auto session : sessions) {
      auto it = decoding.find(session);
      if (it == decoding.end())
        co_return lose_mesh("server 0 planned a decode step of session " + std::to_string(session) +
                            ", which is not decoding at server " + std::to_string(id()));
      batch.push_back(it->second);
    }
    const std::uint64_t step_number = ++steps_run;  // from 1: a newcomer (0) goes first
    ++stats.batched_steps;
    stats.batched_rows += batch.size();
    try {
      co_await store_refill.before_step(*party, p, batch.size());  // offline, before the step's window
      std::vector<Decoder<Rss3>::BatchSlot<kv::AnyPolicy<Rss3>>> slots;
      std::vector<std::size_t> tested;
      std::optional<Rss3Share> tests;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        batch[i]->last_step = step_number;
        slots.push_back({batch[i]->decoder.get(), batch[i]->policy.get(), batch[i]->row});
        if (!batch[i]->stop_test_due) continue;
        tested.push_back(i);
        tests = tests ? ops::stack_rows<Rss3>(*tests, stop_test(*batch[i])) : stop_test(*batch[i]);
      }
      Rss3Share logits;
      std::vector<bool> stopped(batch.size(), false);
      // The decode on the step's first fork whether or not tests ride along,
      // so that its truncations keep their plan keys from step to step.
      Rss3 pa = p.fork();
      if (tests) {
        Rss3 pb = p.fork();
        auto [next_logits, hits] = co_await when_all(Decoder<Rss3>::decode_batch(pa, std::move(slots)), pb.reveal(*tests));
        logits = std::move(next_logits);
        for (std::size_t k = 0; k < tested.size(); ++k) stopped[tested[k]] = hits(k, 0) != 0;
      } else {
        logits = co_await Decoder<Rss3>::decode_batch(pa, std::move(slots));
      }
      std::vector<std::size_t> going;
      std::optional<Rss3Share> rows;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (stopped[i]) {
          end_sequence(*batch[i], "");
          continue;
        }
        going.push_back(i);
      }
      if (going.empty()) co_return;
      if (going.size() == batch.size()) {
        rows = std::move(logits);  // the usual step: every session goes on, no copy
      } else {
        for (std::size_t i : going) {
          auto row = ops::rows<Rss3>(logits, i, i + 1);
          rows = rows ? ops::stack_rows<Rss3>(*rows, row) : row;
        }
      }
      Rss3Share chosen;
      {
        auto scope = cost_scope(p, CostTag::argmax);
        chosen = co_await ops::argmax_onehot_last(p, *rows);
      }
      for (std::size_t k = 0; k < going.size(); ++k) {
        Sequence& seq = *batch[going[k]];
        seq.row = ops::rows<Rss3>(chosen, k, k + 1);
        send_token(seq);
        seq.stop_test_due = !seq.request->request.stop_tokens.empty();
        if (seq.chosen == seq.request->request.new_tokens) end_sequence(seq, "");
      }
    } catch (const Error& e) {
      // The step's streams are the mesh's own: a failure here is the mesh's.
      co_return lose_mesh(std::string("a batched decode step failed: ") + e.what());
    }
  }

  // The mesh cannot go on (a broken batched step): every session ends, and
  // run() stops with an error (systemd restarts the service).
  void lose_mesh(const std::string& why) {
    log(why);
    if (mesh_lost_why.empty()) mesh_lost_why = why;
    mesh_lost = true;
    for (auto& [session, seq] : std::map(decoding)) end_sequence(*seq, why);
    // The others must stop with an error too, not as after an orderly stop.
    if (!mesh.cancelled()) mesh.cancel("server " + std::to_string(id()) + " lost its mesh (" + why + ")");
    changed.notify();
  }

  // The greedy choice as a secret one-hot row (1, vocab): the argmax of the
  // last row of the logits.
  static Task<Rss3Share> chosen_row(Rss3& p, const Rss3Share& logits) {
    auto scope = cost_scope(p, CostTag::argmax);
    const std::size_t rows = Rss3::shape(logits).at(0);
    co_return co_await ops::argmax_onehot_last(p, ops::rows<Rss3>(logits, rows - 1, rows));
  }

  // ---- the server's life ----------------------------------------------------

  // Ends every client link still open: their waits throw and their tasks end.
  void close_links() {
    for (auto& weak : links)
      if (auto link = weak.lock()) link->close();
    links.clear();
  }

  void welcome(std::shared_ptr<ClientLink> link) {
    std::erase_if(links, [](const std::weak_ptr<ClientLink>& l) { return l.expired(); });
    links.push_back(link);
    if (stopping) {
      const std::string why = "shutting down";
      ++stats.refused;
      log("refused " + link->name + ": " + why);
      link->reply(Reply::text(ReplyKind::refused, why));
      link->close();
      return;
    }
    log("client " + link->name + " connected");
    tasks.spawn(read_request(std::move(link)));
  }

  // Ends when the mesh does (a server stopped or died): run() then stops too.
  Task<void> hear_heartbeats(PartyId peer) {
    try {
      for (;;) (void)co_await mesh.recv_idle(peer, heartbeat_stream);
    } catch (const Error& e) {
      if (!stopping && mesh_lost_why.empty()) mesh_lost_why = e.what();
    }
    mesh_lost = true;
    changed.notify();
  }

  void beat() {
    std::weak_ptr<bool> guard = alive;
    timers.at(SteadyClock::now() + options.heartbeat_every, [this, guard] {
      if (guard.expired()) return;
      if (mesh.cancelled()) {  // another server stopped: so does this one
        changed.notify();
        return;
      }
      for (PartyId peer = 0; peer < 3; ++peer)
        if (peer != id()) mesh.send(peer, heartbeat_stream, std::vector<std::byte>{});
      if (stop.stop_requested() && !stopping) {
        stopping = true;
        changed.notify();
      }
      beat();
    });
  }

  // An empty frame on heartbeat_stream to every client link, each
  // heartbeat_every: a client whose request waits in the queue or in a long
  // prefill then still hears from every server, so its silence deadline
  // tells a dead server from a busy one. The client never awaits them.
  void beat_clients() {
    std::weak_ptr<bool> guard = alive;
    timers.at(SteadyClock::now() + options.heartbeat_every, [this, guard] {
      if (guard.expired()) return;
      for (auto& weak : links)
        if (auto link = weak.lock(); link && !link->closed)
          link->endpoint->send(link->client_peer, heartbeat_stream, std::vector<std::byte>{});
      beat_clients();
    });
  }

  void drain() {
    log("stopping: refusing new requests, " + std::to_string(active) + " sessions in flight");
    for (auto& r : queue) refuse_everywhere(*r, "shutting down");
    queue.clear();
    for (auto& [nonce, r] : waiting_for_leader) refuse(*r, "shutting down");
    waiting_for_leader.clear();
    std::weak_ptr<bool> guard = alive;
    timers.at(SteadyClock::now() + options.drain_within, [this, guard] {
      if (guard.expired()) return;
      for (auto [session, scope] : running)
        mesh.cancel_scope(scope, "session " + std::to_string(session) + ": server " + std::to_string(id()) +
                                     " shut down before it finished");
      changed.notify();
    });
  }
};

Server::Server(Scheduler& scheduler, Endpoint& mesh, TimerQueue& timers, ServeOptions options)
    : impl_(std::make_unique<Impl>(scheduler, mesh, timers, std::move(options))) {}

Server::~Server() = default;

bool Server::ready() const noexcept { return impl_->is_ready; }
std::size_t Server::sessions_running() const noexcept { return impl_->active; }

void Server::admit(ClientChannel channel) {
  auto& I = *impl_;
  auto link = make_shared<ClientLink>();
  link->name = channel.peer + " (" + channel.remote + ", connection " + std::to_string(++I.next_link) + ")";
  link->owned_endpoint = std::make_unique<Endpoint>(I.scheduler, 0, 2);
  link->endpoint = link->owned_endpoint.get();
  link->client_peer = 1;
  Connections c;
  c.fds = {-1, channel.fd};
  c.keys = {std::nullopt, channel.keys};
  c.names = {"server " + std::to_string(I.id()), "client " + link->name};
  link->transport = std::make_unique<TcpTransport>(I.scheduler, *link->endpoint, std::move(c), I.options.client_tcp);
  I.welcome(std::move(link));
}

void Server::admit(Endpoint& endpoint, PartyId client, std::string name) {
  auto& I = *impl_;
  auto link = make_shared<ClientLink>();
  link->name = std::move(name) + " (connection " + std::to_string(++I.next_link) + ")";
  link->endpoint = &endpoint;
  link->client_peer = client;
  I.welcome(std::move(link));
}

Task<ServeStats> Server::run(std::stop_token stop) {
  auto& I = *impl_;
  I.stop = std::move(stop);
  const auto t0 = SteadyClock::now();
  const CostCounters start = I.mesh.costs();
  std::exception_ptr failed;
  I.beat_clients();  // clients may connect while the model is shared
  try {
    I.party = co_await Rss3Party::setup(I.mesh, I.options.rss3);
    Rss3 p = I.party->session();
    const WeightSource source = I.id() == I.options.owner
                                    ? weights_from_file(I.options.model_dir / "model.safetensors", I.options.unused_weights)
                                    : no_weights();
    I.weights = co_await load_decoder(p, I.config, source, I.options.owner);
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {  // clients that came meanwhile are told, then the error goes on
    I.stopping = true;
    I.changed.notify();
    I.close_links();
    co_await I.tasks.idle();
    std::rethrow_exception(failed);
  }
  I.stats.setup_seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  I.stats.setup_costs = I.mesh.costs() - start;
  I.is_ready = true;
  I.changed.notify();
  I.log("ready: model shared in " + std::to_string(I.stats.setup_seconds) + " s (" +
        std::to_string(I.stats.setup_costs.payload_bytes_sent()) + " bytes sent); " + I.config.summary());
  for (PartyId peer = 0; peer < 3; ++peer)
    if (peer != I.id()) I.tasks.spawn(I.hear_heartbeats(peer));
  if (I.id() != leader) I.tasks.spawn(I.hear_announcements());
  if (I.batching() && I.id() == leader) {
    for (std::size_t lane = 0; lane < I.lanes(); ++lane) I.tasks.spawn(I.lead_lane(lane));
    for (PartyId peer = 1; peer < 3; ++peer) I.tasks.spawn(I.hear_batch_ready(peer));
  } else if (I.batching()) {
    I.tasks.spawn(I.follow_batches());
  }
  I.beat();
  while (!I.stopping && !I.mesh_lost && !I.mesh.cancelled()) co_await I.changed.wait();
  I.stopping = true;
  I.drain();
  while (I.active > 0) co_await I.changed.wait();
  // The background loops wait on the mesh: ending it ends them (and tells
  // the other servers, which stop too: the service needs all three).
  I.mesh.cancel(I.mesh_lost_why.empty() ? "server " + std::to_string(I.id()) + " stopped"
                                        : "server " + std::to_string(I.id()) + " lost its mesh (" + I.mesh_lost_why + ")");
  I.changed.notify();  // the leader's batch planner sees the end
  I.close_links();  // clients still connected without a session
  co_await I.tasks.idle();
  I.lane_streams.clear();
  I.stats.offline = I.store_refill.costs();
  I.stats.truncations_with_pairs = I.party->truncation_stats().from_pairs;
  I.stats.truncations_in_two_rounds = I.party->truncation_stats().two_round;
  I.stats.comparisons_from_store = I.party->dcf_stats().from_store;
  I.stats.comparisons_inline = I.party->dcf_stats().inline_elements;
  I.stats.store_ran_dry = I.party->dcf_stats().ran_dry;
  I.log("stopped: " + std::to_string(I.stats.sessions_done) + " sessions done, " +
        std::to_string(I.stats.sessions_failed) + " failed, " + std::to_string(I.stats.refused) + " refused");
  // Another server's orderly stop is ours too; a broken link is an error.
  const std::string& why = I.mesh_lost_why;
  if (!why.empty() && (!why.starts_with(to_string(ErrorCode::cancelled)) || why.find("lost its mesh") != std::string::npos))
    throw Error(ErrorCode::network, "the service lost its mesh: " + why);
  co_return I.stats;
}

}  // namespace mpcache::serve
