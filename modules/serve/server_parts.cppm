// The parts of one server (Server, :server), by job, and what they share.
// Declared together because they call one another; each is defined in its
// own file:
//   src/serve/admission.cpp  clients that connect and their requests: the
//                            leader admits, queues or refuses each and tells
//                            servers 1 and 2, which match its word with theirs
//   src/serve/session.cpp    a session from its admission to its end: the
//                            prompt, the prefill, its own decode steps (no
//                            batching), each token to its client
//   src/serve/batcher.cpp    batched decode steps: the leader's plans
//                            (BatchPlanner), the lanes, the steps' MPC
//   src/serve/liveness.cpp   heartbeats, clients' silence, the drain at a stop
//   src/serve/server.cpp     Server: options checked, the model shared, run()
// Nothing here is exported: the module's users see Server only.
export module mpcache.serve:server_parts;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.kv;
import mpcache.model;
import :messages;
import :task_group;
import :store_refill;
import :batch_planner;
import :server;

namespace mpcache::serve {

// Server 0 admits requests and plans the batched steps.
inline constexpr PartyId leader = 0;
// A bound on the lanes a leader may ask for, so that a garbled step cannot
// make a server open streams without end.
inline constexpr std::size_t max_lanes = 64;

// What a request queued, or arriving, during a drain is told (with no
// output: it may be retried once the service is back).
inline constexpr const char* shutting_down = "shutting down: the service is draining; retry once it is back";
// After the drain, how long servers 1 and 2 wait for the leader to close
// the mesh, and the leader for their byes.
inline constexpr std::chrono::milliseconds bye_within{5000};

inline ScopeId scope_of(std::uint64_t session) { return static_cast<ScopeId>(1 + session % max_scope); }

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
  Rss3Share row;               // its last chosen token (one-hot), the next step's input
  bool stop_test_due = false;  // row's stop test is opened alongside the next step
  std::size_t chosen = 0;      // tokens chosen so far
  std::optional<Rss3Share> noise;  // sampled: (new_tokens, vocab) Gumbel noise shares, row `chosen` is the next token's
  // Speculating (ServeRequest::speculate > 0): each step's rows come from
  // the client (drafts_due() + 1 of them: the last token, then the drafts),
  // and `row` is unused.
  std::size_t speculate = 0;
  std::optional<Rss3Share> drafted;  // the next step's rows, once they came here
  // Drafts the next step verifies: as many as the budget leaves room for.
  std::size_t drafts_due() const {
    const std::size_t left = request->request.new_tokens - chosen;
    return left == 0 ? 0 : std::min(speculate, left - 1);
  }
  bool ended = false;
  std::string failure;  // why it ended early; "" once done
};

// What every part of a server shares: the loop, the mesh and the model,
// the tasks it runs, one signal for every change a waiting loop looks for,
// and whether the server is ready, stopping or cut off.
struct ServerContext {
  // Reads config.json and checks the options against the mesh; throws naming what is wrong.
  ServerContext(Scheduler& scheduler, Endpoint& mesh, TimerQueue& timers, ServeOptions options);

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
  bool is_ready = false;
  // No new requests: at the leader once the drain began (a stop asked here
  // or at server 1 or 2), at servers 1 and 2 once the leader said it is complete.
  bool stopping = false;
  bool stop_asked = false;      // a stop was requested here (SIGTERM): the leader is told, and drains
  bool drain_complete = false;  // every session the leader admitted has ended at all three
  int stop_asked_by = -1;       // the server whose stop request began the drain
  bool mesh_lost = false;     // a link of the mesh failed or was cancelled: the service is over
  std::string mesh_lost_why;  // when that happened before a stop of ours
  std::stop_token stop;
  ServeStats stats;

  PartyId id() const { return mesh.id(); }
  bool batching() const { return options.max_batch > 1; }
  void log(const std::string& line) const {
    if (options.log) options.log("server " + std::to_string(mesh.id()) + ": " + line);
  }
};

class Admission;
class Sessions;
class Batcher;

// Keeps each side knowing the other is there: heartbeats on the mesh and to
// every client, deadlines on a client's silence, and at a stop the
// coordinated drain: a stop asked at any server goes to the leader, which
// refuses new and queued requests, gives the sessions in flight
// drain_within (then cancels their scopes: at every server, so they leave
// the batches between steps), and declares the drain complete once each
// session it admitted has ended at all three servers. Only then does a
// server close the mesh, so no stop ends a step another server still runs.
class Liveness {
 public:
  Liveness(ServerContext& server, Admission& admission, Sessions& sessions)
      : s_(server), admission_(admission), sessions_(sessions) {}

  // From now on the link hears heartbeats, and is closed at the end (close_links).
  void keep(std::shared_ptr<ClientLink> link);
  // Ends every client link still open: their waits throw and their tasks end.
  void close_links();
  // Heartbeats to the other servers, each heartbeat_every; also where a stop request is noticed.
  void beat();
  void beat_clients();
  Task<void> hear_heartbeats(PartyId peer);
  void fail_unless_by(const std::shared_ptr<ClientLink>& link, std::shared_ptr<bool> done,
                      std::chrono::milliseconds limit, const std::string& what);
  Task<void> watch_client(std::uint64_t session, std::shared_ptr<ClientLink> link);

  // The drain. The leader counts where each session it admitted has ended.
  void admitted(std::uint64_t session);      // leader
  void session_ended(std::uint64_t session);  // any server: its part of the session is over (or never began)
  Task<void> hear_drain(PartyId peer);        // the leader hears 1 and 2; they hear the leader
  // run(), on every change until the drain is complete or the mesh fails:
  // a stop asked here goes to the leader; the leader begins the drain and
  // ends it. True once it is complete.
  bool drain_step();
  // After the drain: the leader's word to 1 and 2 and their byes, so that
  // the leader closes the mesh last; bounded by bye_within.
  Task<void> finish_drain();
  // The mesh failed: requests waiting are refused, sessions cut after drain_within.
  void cut_short();

 private:
  void begin_drain(PartyId asked_by);  // leader

  ServerContext& s_;
  Admission& admission_;
  Sessions& sessions_;
  std::map<std::uint64_t, unsigned> ended_at_;  // leader: admitted sessions not yet ended everywhere -> servers (bits)
  bool told_leader_ = false;                    // 1, 2: the stop asked here went to the leader
  unsigned byes_ = 0;                           // leader: servers 1, 2 that answered 'complete'
  std::vector<std::weak_ptr<ClientLink>> links_;  // every client link, to beat to and to close at the end
};

// Requests, from a client's connection to its session's launch (or refusal).
class Admission {
 public:
  Admission(ServerContext& server, Sessions& sessions, Liveness& liveness)
      : s_(server), sessions_(sessions), liveness_(liveness), next_session_(server.options.first_session) {}

  // Numbers the connections, for the logs.
  std::uint64_t next_link_number() { return ++next_link_; }
  void welcome(std::shared_ptr<ClientLink> link);
  Task<void> hear_announcements();  // servers 1 and 2
  void start_queued();              // leader
  // At a stop: every request queued or not yet matched is refused `why`.
  void refuse_waiting(const std::string& why);

 private:
  void refuse(Request& r, const std::string& why);
  void refuse_everywhere(Request& r, const std::string& why);
  bool has_room(const ServeRequest& q) const;
  void consider(const std::shared_ptr<Request>& r);
  void start_as_leader(const std::shared_ptr<Request>& r);
  void match(const Announcement& a, const std::shared_ptr<Request>& r);
  Task<void> read_request(std::shared_ptr<ClientLink> link);

  ServerContext& s_;
  Sessions& sessions_;
  Liveness& liveness_;
  std::uint64_t next_session_;  // leader
  std::uint64_t next_link_ = 0;
  std::deque<std::shared_ptr<Request>> queue_;                    // leader: admitted later
  std::map<Nonce, std::shared_ptr<Request>> waiting_for_leader_;  // others: requests not yet announced
  std::map<Nonce, Announcement> waiting_for_client_;              // others: announcements before their request
};

// The sessions running at this server, each from its launch to its end.
class Sessions {
 public:
  Sessions(ServerContext& server, Admission& admission, Batcher& batcher, Liveness& liveness)
      : s_(server), admission_(admission), batcher_(batcher), liveness_(liveness) {}

  void launch(std::uint64_t session, const std::shared_ptr<Request>& r);
  std::size_t active() const { return active_; }
  std::uint64_t kv_in_use() const { return kv_in_use_; }
  bool running(std::uint64_t session) const { return running_.contains(session); }
  const std::map<std::uint64_t, ScopeId>& scopes() const { return running_; }

  // The chosen token's index to the client (this server's part of it).
  void send_token(Sequence& seq);
  // A speculative step's tokens (n, 1), the accepted drafts and the
  // correction, to the client (this server's part of them).
  void send_verified(Sequence& seq, const Rss3Share& tokens);
  // One token sent: the step report, a test's stop point, the count.
  void count_chosen(Sequence& seq);
  // Whether the last chosen token is a stop token, still secret (1, 1): the
  // sum of its one-hot entries at the stop ids.
  static Rss3Share stop_test(const Sequence& seq);
  // The logits `rows` (one row per sequence of `seqs`, in order) plus each
  // sampled sequence's noise row for its next token.
  static Rss3Share with_noise(Rss3& p, Rss3Share rows, const std::vector<const Sequence*>& seqs, std::size_t vocab);

 private:
  Task<void> run_session(std::uint64_t session, std::shared_ptr<Request> r);
  void send_accepted(ClientLink& link, std::uint64_t session);
  Task<void> generate_tokens(std::uint64_t session, std::shared_ptr<Request> r, std::size_t& chosen, bool& joined);
  static Task<Rss3Share> chosen_row(Rss3& p, const Rss3Share& logits, const Sequence& seq);
  void stop_here_at(std::uint64_t session, std::int64_t step);  // ServeOptions::stop_at

  ServerContext& s_;
  Admission& admission_;
  Batcher& batcher_;
  Liveness& liveness_;
  std::size_t active_ = 0;
  std::uint64_t kv_in_use_ = 0;
  std::map<std::uint64_t, ScopeId> running_;  // session -> scope
};

// Batched decoding (max_batch > 1): sessions past their prefill step
// together, in the steps the leader plans (BatchPlanner) and every server runs.
class Batcher {
 public:
  Batcher(ServerContext& server, Sessions& sessions, Liveness& liveness);

  // Once the model is shared: the leader's lanes and its ear for servers 1
  // and 2, or a follower's loop over the leader's plans.
  void start();
  // A session whose prefill is done here waits in the batches until it ends.
  Task<void> join_batches(std::shared_ptr<Sequence> seq);
  // A session failed here before it joined: the servers that did let it go.
  void failed_before_joining(std::uint64_t session, const std::string& failure);
  // The session's run has ended here: nothing of it is kept.
  void forget(std::uint64_t session);
  // The mesh is gone (a server died or stopped): no step can run again, so
  // every session waiting in the batches ends here now, failed with `why`,
  // whether or not a step was in flight (the lanes' loops just return).
  void end_all(const std::string& why);
  // After the tasks: the lanes' streams go before the party does.
  void close_lanes() { lane_streams_.clear(); }
  const OfflineCosts& offline_costs() const { return store_refill_.costs(); }

 private:
  std::size_t lanes() const;
  void leave(std::uint64_t session, const std::string& why);
  void end_sequence(Sequence& seq, const std::string& failure);
  Task<void> lead_lane(std::size_t lane);
  Task<void> follow_batches();
  void begin_step(std::uint64_t lane, const std::vector<std::uint64_t>& sessions);
  Task<void> run_lane_step(std::uint64_t lane, std::vector<std::uint64_t> sessions);
  Task<void> hear_batch_ready(PartyId peer);
  Task<void> run_step(Rss3& p, const std::vector<std::uint64_t>& sessions);
  void lose_mesh(const std::string& why);
  // Speculating sessions (src/serve/batch_drafts.cpp): each step's rows
  // from the client, and what a step does with them.
  Task<void> receive_drafts(std::shared_ptr<Sequence> seq);
  Task<void> wait_for_drafts(const std::vector<std::uint64_t>& last, double last_seconds);
  void drafts_came(std::uint64_t session);
  void drafts_failed(std::uint64_t session, const std::string& failure);
  using DraftedRows = DraftRows<Rss3, kv::AnyPolicy<Rss3>>;
  // After the step's argmax: each speculating sequence's acceptance (all
  // in the same rounds), its tokens to its client, its cache and policy as
  // its last accepted row left them. `rows`: its step's one-hot rows;
  // `chosen`: their argmaxes, one-hot.
  Task<void> accept_drafts_of(Rss3& p, const std::vector<Sequence*>& seqs, const std::vector<Rss3Share>& rows,
                              const std::vector<Rss3Share>& chosen, std::vector<std::unique_ptr<DraftedRows>>& kept);

  ServerContext& s_;
  Sessions& sessions_;
  Liveness& liveness_;
  std::map<std::uint64_t, std::shared_ptr<Sequence>> decoding_;  // joined here, not yet ended
  std::map<std::uint64_t, std::string> left_early_;              // others: left before they joined here
  BatchPlanner planner_;
  StoreRefill store_refill_;  // DCF keys and truncation pairs, offline
  // Each lane's stream, the same from step to step, so that a refill
  // reserves truncation pairs for the calls the next step repeats
  // (Rss3TruncationPlan keys derive from the stream). Opened in lane order
  // when a lane is first used, so the servers' stream ids agree; a deque,
  // so that opening one does not move another a step is using.
  std::deque<Rss3> lane_streams_;
};

}  // namespace mpcache::serve
