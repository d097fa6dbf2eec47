// Endpoint: one party's view of the network, independent of the transport.
// Protocols send to (peer, stream) and await receives from (peer, stream).
// Sends are held in a per-peer outbox until the end of the scheduler tick and
// then handed to the transport as one batch, so concurrent sub-protocols that
// send in the same tick share one write and one round trip.
//
// Rounds are a Lamport clock: each frame carries the sender's clock; taking a
// frame sets clock = max(clock, frame clock + 1). The clock is thus the length
// of the longest chain of dependent messages that reached this party, i.e.
// the rounds along its critical path, however many sub-protocols ran at once.
//
// Cancellation. `cancel(why)` (or a stop requested on the token given to
// `cancel_when`, seen at the end of the tick) stops this party's work:
// every receive, waiting or future, throws Error(cancelled), and every peer
// is told on cancel_stream, where the same happens to all of its receives
// (not only those from the cancelling party: a party waiting on a third one
// would otherwise wait for a message that never comes). A party told so
// passes it on (cancel_relay_stream) before it unwinds, so that every party
// names the canceller whichever link it reads first. One party's caller
// thus unwinds the whole computation at every party within a round trip.
export module mpcache.net:endpoint;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import :frame;

export namespace mpcache {

// The stream of Endpoint::abort's messages (no protocol derives it by chance:
// stream ids are 64-bit hashes).
inline constexpr StreamId abort_stream = ~StreamId{0} - 1;
// The stream of Endpoint::cancel's messages.
inline constexpr StreamId cancel_stream = ~StreamId{0} - 2;
// A cancellation passed on by a party that was told: 4 bytes (little
// endian) naming the party that cancelled, then its why. Each link is its
// own connection, so a third party may read the relayer's close before the
// canceller's own message; the relay, sent ahead of that close, still
// tells it that this was a cancellation and whose.
inline constexpr StreamId cancel_relay_stream = ~StreamId{0} - 4;

// Scopes: the top 16 bits of a stream id may name a scope, e.g. one session
// of a service (a protocol handle made for a scope keeps them in every fork).
// Cancelling a scope ends the receives on its streams only, at this party and
// at its peers, and leaves every other scope running. Scope 0 is "none" and
// 0xFFFF is reserved (the control streams above live there).
using ScopeId = std::uint16_t;
inline constexpr int scope_shift = 48;
inline constexpr ScopeId no_scope = 0;
inline constexpr ScopeId max_scope = 0xFFFE;
inline constexpr ScopeId stream_scope(StreamId stream) noexcept { return ScopeId(stream >> scope_shift); }
// A derived stream id (a 64-bit hash) in no scope: its top 16 bits cleared,
// so that cancelling a session's scope can never end it by chance.
inline constexpr StreamId without_scope(StreamId stream) noexcept {
  return stream & ((StreamId{1} << scope_shift) - 1);
}
// The stream of Endpoint::cancel_scope's messages: 2 bytes scope, then why.
inline constexpr StreamId scope_cancel_stream = ~StreamId{0} - 3;

// Moves batches of frames between parties. Implementations: in-process
// (:in_process) and TCP over io_uring, poll or asio (:tcp), optionally behind the
// link emulator (:link_emulation).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual void write(PartyId from, PartyId to, std::vector<Frame>&& batch) = 0;
  virtual std::string name() const = 0;
};

class Endpoint final : public TickListener {
 public:
  Endpoint(Scheduler& scheduler, PartyId self, std::size_t parties);
  ~Endpoint() override;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  void attach(Transport* transport) { transport_ = transport; }

  PartyId id() const noexcept { return self_; }
  std::size_t parties() const noexcept { return parties_; }
  Scheduler& scheduler() noexcept { return scheduler_; }
  const Transport* transport() const noexcept { return transport_; }

  // Queue a message; it leaves at the end of the current tick. `tag` only
  // sorts the cost counters (CostCounters::by_tag).
  void send(PartyId to, StreamId stream, std::vector<std::byte>&& payload, CostTag tag = CostTag::other);
  void send(PartyId to, StreamId stream, std::span<const std::byte> payload, CostTag tag = CostTag::other);

  struct RecvAwaiter {
    Endpoint* endpoint;
    PartyId from;
    StreamId stream;
    CostTag tag;
    Frame frame;
    bool unreceivable = false;  // set instead of a frame: peer gone or cancelled
    // An idle wait (a server waiting for its next request) does not make
    // the transport's silence deadline apply to `from`.
    bool idle = false;
    // The stop signal of the awaiting coroutine, and whether it ended the wait.
    const StopSignal* stop_signal = nullptr;
    bool stopped = false;
    // Wakes the waiting receive with Error(cancelled) when its signal stops.
    struct OnStop {
      RecvAwaiter* self;
      void operator()() const noexcept;
    };
    std::optional<std::stop_callback<OnStop>> on_stop{};  // makes the awaiter immovable
    bool await_ready();
    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) {
      return suspend(h, stop_signal_of(h));
    }
    // Registers the wait; false (resume now, and throw) if `signal` stopped.
    bool suspend(std::coroutine_handle<> h, const StopSignal* signal);
    std::vector<std::byte> await_resume();
  };
  // `co_await endpoint.recv(peer, stream)` yields the next payload in order.
  // Rounds this message adds to the critical path count under `tag`.
  RecvAwaiter recv(PartyId from, StreamId stream, CostTag tag = CostTag::other);
  // The same, but an idle wait: a peer may stay silent for as long as it
  // likes while only idle receives wait on it (its link still fails when it
  // closes or breaks).
  RecvAwaiter recv_idle(PartyId from, StreamId stream);

  // Transport side: frames that arrived from `from`, in order.
  void deliver(PartyId from, std::vector<Frame>&& frames);
  // Transport side: the link to `peer` is gone; waiters get Error(network).
  // The first reason stays (a peer's abort is not replaced by its close).
  void fail(PartyId peer, const std::string& why);
  // This party stops on an error: every peer still connected is told why
  // (a message on abort_stream, handed to the transport at once), and fails
  // its waits on this party with "party N stopped: <why>" instead of a bare
  // closed connection; a peer whose own failure caused this one is thus
  // named at every party. Call before the transport shuts down.
  void abort(const std::string& why);
  // Stops this party's work and tells every peer still connected: all
  // receives here and at the peers throw Error(cancelled) naming `why`
  // (the peers: "party N cancelled: <why>"). A second call, or one after a
  // peer's cancellation, changes nothing.
  void cancel(const std::string& why);
  // cancel("stopped by its caller") at the end of the first tick that sees
  // a stop requested on `token`; the request may come from any thread (it
  // takes effect on the loop's thread, within one round trip while the
  // peers are alive, or at the transport's deadline).
  void cancel_when(std::stop_token token) { stop_ = std::move(token); }
  bool cancelled() const noexcept { return !cancelled_.empty(); }
  // Ends every receive, waiting or future, on the streams of `scope` with
  // Error(cancelled) naming `why`, here and (told at once) at every peer;
  // frames that arrive for it later are dropped. Other scopes go on.
  void cancel_scope(ScopeId scope, const std::string& why);
  // Why `scope` was cancelled here ("" while it was not).
  std::string scope_cancelled(ScopeId scope) const;
  // Makes `scope` usable again: forgets its cancellation (its frames were
  // dropped when it was cancelled). A service forgets a cancellation long
  // before it reuses the scope, so no late frame of the old session can
  // reach the new one and no early frame of the new one is dropped.
  void open_scope(ScopeId scope);
  // What this endpoint holds open, for a long-running party to watch: the
  // streams a receive waits on, the streams holding frames no receive took
  // yet (and those frames), and the scopes cancelled and not yet reopened.
  struct StreamCounts {
    std::size_t receiving = 0, holding = 0, held_frames = 0, cancelled_scopes = 0;
  };
  StreamCounts stream_counts() const noexcept;
  // Transport side: whether a task is blocked on a message from `peer`
  // (deadlines apply only then).
  bool waiting_on(PartyId peer) const;

  const CostCounters& costs() const noexcept { return costs_; }
  std::uint64_t rounds() const noexcept { return costs_.rounds; }

  void on_tick_end() override;
  std::string describe_waiting() const override;

 private:
  struct Key {
    PartyId peer;
    StreamId stream;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return std::hash<std::uint64_t>{}(k.stream * 0x9E3779B97F4A7C15ull ^ k.peer);
    }
  };
  struct Waiter {
    std::coroutine_handle<> handle;
    RecvAwaiter* awaiter;
  };

  void check_peer(PartyId peer, const char* what) const;
  // An idle receive's frame (a heartbeat, a server's next request) counts
  // its bytes but does not move the round clock.
  void take(Frame& frame, PartyId from, CostTag tag, bool advance_clock = true);
  // Why a receive from `from` cannot complete: Error(cancelled) once this
  // party is cancelled, Error(network) when that link failed.
  [[noreturn]] void throw_unreceivable(PartyId from) const;
  // Every peer still connected gets `text` on `stream`, handed
  // to the transport at once.
  void tell_peers(StreamId stream, const std::string& text);
  void tell_peers_one(PartyId to, StreamId stream, const std::string& text);
  // Cancels here on a peer's word (`canceller` cancelled, saying `why`),
  // and passes it on to the peers that may not have heard it yet.
  void cancel_on_peers_word(PartyId from, PartyId canceller, const std::string& why);
  void cancel_scope_locally(ScopeId scope, const std::string& why);
  void cancel_locally(const std::string& why);

  Scheduler& scheduler_;
  PartyId self_;
  std::size_t parties_;
  Transport* transport_ = nullptr;
  std::vector<std::vector<Frame>> outbox_;
  std::unordered_map<Key, std::deque<Frame>, KeyHash> mailbox_;
  std::unordered_map<Key, Waiter, KeyHash> waiters_;
  std::vector<std::string> failed_;  // per peer: why the link is gone ("" = fine)
  std::string cancelled_;            // why this party's work was cancelled ("" = it was not)
  // Cancelled scopes: each one's bit (its frames are dropped until
  // open_scope), and why for the latest kept_cancel_reasons only (an older
  // one reads "scope N cancelled"), so that memory stays flat however many
  // sessions of a long-running service fail.
  static constexpr std::size_t kept_cancel_reasons = 1024;
  std::vector<bool> cancelled_scope_bits_ = std::vector<bool>(std::size_t{1} << 16);
  std::size_t cancelled_scope_count_ = 0;
  std::uint64_t cancel_serial_ = 0;
  std::unordered_map<ScopeId, std::pair<std::uint64_t, std::string>> cancel_reasons_;  // scope -> (serial, why)
  std::deque<std::pair<ScopeId, std::uint64_t>> cancel_reasons_by_age_;
  std::stop_token stop_;
  CostCounters costs_;
  // When the round clock last advanced: the wall time since then is charged
  // to the tag of the message that advances it next (a critical-path view).
  std::chrono::steady_clock::time_point last_advance_ = std::chrono::steady_clock::now();
};

}  // namespace mpcache
