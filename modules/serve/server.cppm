// One server of a private inference service (docs/serving.md).
// Three servers run for a long time: they connect their mesh once, agree on
// keys once, and the model owner shares the weights once. Clients outside
// the three connect to every server (ClientDoor), give their prompt as
// secret shares and get each chosen token opened to them alone; no server
// sees a prompt or a token.
//
// Sessions. Server 0, the leader, admits requests: it gives each a session
// number, or queues it, or refuses it ("busy", "shutting down", a bad
// request), and tells servers 1 and 2 (an announcement on the mesh). A
// session runs in its own scope of the mesh's streams (Rss3::scoped_session),
// with its own decoder cache and policy state, concurrently with the others
// on the one loop, so their rounds interleave. A session that fails (its
// client vanishes or sends garbage, a server refuses its request) cancels
// its scope at every server and ends alone.
//
// The chosen token never leaves the servers on the critical path: its
// secret index becomes a secret one-hot row that feeds the next step, and
// each server sends its part of the index to the client on the side. A stop
// token is detected under MPC (the one-hot's entries at the stop ids, opened
// to the servers alongside the next step), so generation ends where it
// would with the client in the loop, and the servers learn only what they
// learned then: after which step it ended.
//
// Continuous batching (max_batch > 1). Once a session's prefill is done at
// all three servers, its decode steps join the batch: the leader plans each
// step (which sessions, in which row order, who leaves) and tells servers 1
// and 2; the step then runs for all its sessions at once
// (Decoder::decode_batch: the stacked rows meet each weight matrix once,
// their norms, MLPs and argmax share rounds; attention runs per session).
// A session joins or leaves between any two steps; one whose client went
// away leaves at the next step and the others go on. With decode_lanes > 1,
// that many batched steps are in flight at once, each on its own stream and
// with its own sessions, so that one step's computation fills the time
// another waits on its round trips.
export module mpcache.serve:server;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.model;
import :messages;
import :store_refill;

export namespace mpcache::serve {

// A token chosen at one server: the session, the step (0: the prefill's),
// and this server's round clock and bytes sent so far, online: the mesh's
// less its offline refills' (exact per session only while it runs alone),
// with those refills' own totals beside them.
struct StepReport {
  PartyId server = 0;
  std::uint64_t session = 0;
  std::size_t step = 0;
  std::uint64_t rounds = 0, bytes = 0;
  OfflineCosts offline;
  std::uint64_t dealt_inline = 0;  // comparisons = dcf: elements this server dealt inline so far
};

struct ServeOptions {
  std::filesystem::path model_dir;  // config.json (all servers), model.safetensors (the owner only)
  PartyId owner = 1;                // reads the weights, once per start
  std::size_t max_sessions = 4;     // running at once; the leader's count decides
  std::size_t max_queued = 16;      // waiting beyond those; more are refused "busy"
  // The KV caches of the running sessions, per server (an estimate from the
  // shapes: keys and values of every layer, two components of 8 bytes).
  std::uint64_t kv_bytes_limit = std::uint64_t{4} << 30;
  std::size_t max_new_tokens = 1024;
  // Sessions in their decode phase step together, at most this many per
  // step (continuous batching); 1: each session decodes on its own, its
  // rounds interleaved with the others' (no batching).
  std::size_t max_batch = 8;
  // Batched steps in flight at once (max_batch > 1): the leader splits the
  // decoding sessions across them evenly, so one step computes while
  // another waits on its round trips, at the price of smaller batches. On
  // one 2-core host for all three servers it gained nothing (the lanes
  // compete for the same cores: bench/results/serve-lanes.jsonl), hence 1.
  // Offline stores (DCF keys, truncation pairs) are refilled at a point
  // where no step runs, so with a store the servers run one lane whatever
  // this says.
  std::size_t decode_lanes = 1;
  UnusedTensors unused_weights = UnusedTensors::reject;
  Rss3Options rss3;
  // A request must reach all three servers within this; then it is refused.
  std::chrono::milliseconds match_within{10000};
  // After a stop: sessions in flight may finish within this; then they are cancelled.
  std::chrono::milliseconds drain_within{30000};
  // Each server beats to the other two and to every client connected, this
  // often; keep the clients' silence deadlines several beats long.
  std::chrono::milliseconds heartbeat_every{1000};
  // A session's client must send its prompt shares within this; otherwise
  // the session fails and the client is told why before its channel closes.
  // Keep client_tcp.silence_timeout longer: it is the transport's backstop,
  // and a client it cuts off learns only that its channel closed.
  std::chrono::milliseconds prompt_within{8000};
  TcpOptions client_tcp;  // the client channels' transport (silence deadline, driver)
  std::function<void(const std::string&)> log;  // one line per event; nothing by default
  // Comparisons = dcf with a store (rss3.offline_budget > 0; needs
  // max_batch > 1): a refill before a batched step tops the store up to
  // this many steps' keys (StoreRefill). Truncation pairs
  // (rss3.truncation_pairs_budget > 0, exact truncation, max_batch > 1) are
  // made before each batched step for the calls the last one made.
  std::size_t refill_steps_ahead = 4;
  // After each chosen token (StepReport). Benches and tests.
  std::function<void(const StepReport&)> on_step;
  // Tests: a stop as if requested here (SIGTERM), at a known phase of one
  // session: when it is launched here, before its prefill (step -1), or
  // right after this server chose its token number `step` (0: the
  // prefill's; new_tokens - 2: its last step comes next).
  struct StopAt {
    std::uint64_t session = 0;
    std::int64_t step = -1;
  };
  std::optional<StopAt> stop_at;
  // Tests: the leader numbers sessions from here, so that a test can run
  // sessions across the wrap of their 16-bit scopes (scope_of) in seconds.
  std::uint64_t first_session = 0;
  // Once the model is shared and requests are taken (a supervisor's
  // readiness signal; the log says "ready: model shared" too).
  std::function<void()> on_ready;
};

struct ServeStats {
  double setup_seconds = 0;   // keys and weight sharing
  CostCounters setup_costs;   // this server's traffic for them (the weights cross once per start)
  std::uint64_t sessions_done = 0, sessions_failed = 0, refused = 0;
  // Batched decoding: steps run, and rows in them (one per session per
  // step, K'+1 for a speculating one); rows / steps is the mean batch.
  std::uint64_t batched_steps = 0, batched_rows = 0;
  // Steps with a speculating session, and those also with one that is not.
  std::uint64_t speculative_steps = 0, mixed_steps = 0;
  // The offline refills (DCF keys, truncation pairs). Comparisons = dcf:
  // how the steps' deals were served (Rss3DcfStats: from the store,
  // inline, deals the store could not fully serve).
  OfflineCosts offline;
  std::uint64_t comparisons_from_store = 0, comparisons_inline = 0, store_ran_dry = 0;
  // Exact truncations, elements: with a pair (one round), and in two rounds
  // where pairs were on but none was held (Rss3TruncationStats).
  std::uint64_t truncations_with_pairs = 0, truncations_in_two_rounds = 0;
  // The run ended in a drain that all three agreed on (every admitted
  // session ended at all three servers), begun by the stop requested at
  // server stop_asked_by (-1: no drain; the mesh ended it).
  bool drained = false;
  int stop_asked_by = -1;
};

class Server {
 public:
  // Reads the public config.json; throws naming it if it cannot.
  Server(Scheduler& scheduler, Endpoint& mesh, TimerQueue& timers, ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Keys and weights, then serves until a stop is requested on `stop` here
  // or at another server; then the service drains: server 0 refuses new
  // and queued requests ("shutting down"), lets the sessions in flight
  // finish within its drain_within, cancels the rest at all three, and
  // tells servers 1 and 2 once every session it admitted has ended at all
  // three. Then all three close the mesh and return.
  Task<ServeStats> run(std::stop_token stop);
  // On the loop's thread: a client that passed the door. One that comes
  // while the weights are being shared waits for them.
  void admit(ClientChannel channel);
  // The same for a client reached another way (tests: an in-process
  // network): it is party `client` of `endpoint`, which the caller keeps
  // alive until run() returns.
  void admit(Endpoint& endpoint, PartyId client, std::string name);
  bool ready() const noexcept;
  std::size_t sessions_running() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What a session's KV cache takes at one server, as admission counts it.
std::uint64_t session_kv_bytes(const ModelConfig& config, std::uint64_t positions);
// All that admission counts for a request at one server: its KV cache, and
// a sampled request's noise shares (two components per token and entry).
std::uint64_t session_memory_bytes(const ModelConfig& config, const ServeRequest& request);
// Why a service cannot serve `request` at all, "" if it can: the leader
// refuses it as a bad request before any MPC work. The client chose every
// field, so none may be trusted (a prompt length near 2^64 must not wrap).
std::string request_problem(const ServeOptions& options, const ModelConfig& config, const ServeRequest& request);

}  // namespace mpcache::serve
