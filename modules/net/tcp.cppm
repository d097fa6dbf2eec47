// TCP transport: one connection per party pair (from :connect), driven by
// the caller's Scheduler through the IoSource hook, on one of the drivers
// of net/sys/drivers.cpp: io_uring; poll (plain non-blocking send/recv and
// ppoll) where io_uring cannot start; asio when asked for. Everything the
// endpoint flushes to a peer in one tick goes out as one record (see
// :records) in one send, and comes in through a RecordReader
// (:record_reader). The implementation: net/tcp.cpp (set-up, the loop's
// hooks), tcp_send.cpp, tcp_receive.cpp, tcp_wait.cpp (completions,
// spinning, deadlines), tcp_shutdown.cpp, sharing net/tcp_impl.hpp.
//
// At most one send and one receive are in flight per socket; short reads and
// writes are resumed. A peer that closes, resets, stays silent past the
// deadline while this party waits for it, stops reading, or sends a
// malformed or truncated record makes Endpoint::fail(peer, reason), so
// awaiting tasks get Error(network) naming the peer. Buffers the kernel may
// still use are never freed: shutdown cancels and waits for completions.
//
// Round-trip cost (io_uring driver): a record goes out with one sendmsg(2)
// when the socket takes it at once, as a round's record nearly always
// does; receives are plain recv(2)s; a party that has only receives to wait
// for sleeps in ppoll(2) on their sockets, whose wake-up runs it on the
// sender's core as a blocking recv's would. A round thus costs a party
// three system calls (send, sleep or yield, receive). The ring carries what
// must wait in the kernel: a send the socket cannot take yet, and then the
// receives too, in one io_uring_enter. Frames of 64 KiB and more go out
// from their own payload buffers (gathered, never copied into the record)
// and come in straight into the payload the receiver gets. A transport is
// driven by one thread: the first that polls or sends through it.
export module mpcache.net:tcp;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import :frame;
import :endpoint;
import :timers;
import :connect;

export namespace mpcache {

// The default spin budget of TcpOptions: a few loopback or LAN round trips
// (~15 us each on loopback), so a party that waits for a prompt reply
// never pays a cross-core wake-up, while one that waits for a slow peer
// gives its core back after at most this long.
inline constexpr std::chrono::microseconds default_spin{50};

struct TcpOptions {
  // "auto" (the first driver that starts: io_uring, poll, asio) or a
  // driver's name (tcp_backend_names()).
  std::string backend = "auto";
  // A peer this party waits for that sends nothing for this long, or that
  // accepts none of our data for this long, is declared failed.
  std::chrono::milliseconds silence_timeout{10000};
  // Longest record accepted from a peer (a batch of frames, one tick).
  std::uint64_t max_record_bytes = std::uint64_t{1} << 33;
  // Before it sleeps, a party with nothing to run polls for completions
  // for up to this long, yielding the CPU between polls (0: sleep at once).
  // Waking a sleeping thread costs tens of microseconds when the message
  // comes from another core; a polling party sees it in a few. The default
  // (default_spin) catches a reply already on its way; a larger budget is
  // the low-latency mode for services, for rounds with more local work in
  // between. CPU cost: up to `spin` of CPU time per wait, i.e. a core kept
  // busy while rounds follow each other; the yield lets a peer sharing the
  // core run first.
  std::chrono::microseconds spin = default_spin;
};

// "auto" or a driver's canonical name for `name` (a name or an alias such
// as "uring"); an unknown name throws Error(invalid_argument) listing them.
std::string parse_backend(const std::string& name);
// "auto", then every driver's name, in the order auto tries them.
std::vector<std::string> tcp_backend_names();

class TcpTransport final : public Transport, public IoSource {
 public:
  // Takes ownership of the descriptors in `connections`; attaches itself to
  // `endpoint` and registers with `scheduler`. Throws Error(network) when the
  // forced backend cannot start.
  TcpTransport(Scheduler& scheduler, Endpoint& endpoint, Connections connections,
               TcpOptions options = {});
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  void write(PartyId from, PartyId to, std::vector<Frame>&& batch) override;
  // "tcp/<driver>" (tcp/io_uring, tcp/poll, tcp/asio), plus "+aead" on encrypted channels.
  std::string name() const override;
  std::string backend() const;  // the driver's name: "io_uring", "poll" or "asio"
  // Why the automatic choice passed over a driver ("" when it did not).
  const std::string& fallback_reason() const noexcept { return fallback_reason_; }
  bool encrypted() const noexcept;

  bool has_pending() const override;
  void poll(bool block) override;
  void flush() override;
  // Sleeping with other sources: the sockets of pending receives (readable)
  // and of sends that wait for room (writable), or the io_uring's eventfd
  // while the ring has work; wait_fds also starts the silence clock of a
  // peer a task now waits on. next_wake: the earliest deadline or timer.
  bool wait_fds(std::vector<WaitFd>& out) override;
  std::optional<std::chrono::steady_clock::time_point> next_wake() const override;
  std::chrono::nanoseconds spin_budget() const override;

  TimerQueue& timers() noexcept { return timers_; }

  // Waits (bounded by the silence timeout) until everything written, also
  // through timers, has left, then closes every connection gracefully.
  // Called by the destructor if not called before.
  void shutdown();

  // Bytes on the wire (record headers, frames, AEAD tags), for reports.
  std::uint64_t wire_bytes_sent() const noexcept { return wire_sent_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Scheduler& scheduler_;
  Endpoint& endpoint_;
  TimerQueue timers_;
  std::string fallback_reason_;
  std::uint64_t wire_sent_ = 0;
  friend struct Impl;
};

}  // namespace mpcache
