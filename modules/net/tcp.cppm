// TCP transport: one connection per party pair, driven by the caller's
// Scheduler through the IoSource hook (io_uring, or asio where io_uring is
// unavailable or not wanted). Everything the endpoint flushes to a peer in one
// tick goes out as one record in one send submission:
//
//   record = u32 magic "MPCR" | u32 frame count | u64 body length | body
//   body   = frames (16-byte frame header + payload, see :frame)
//            [AEAD-sealed, with a 16-byte tag, when the channel is encrypted]
//
// At most one send and one receive are in flight per socket; short reads and
// writes are resumed. A peer that closes, resets, stays silent past the
// deadline while this party waits for it, stops reading, or sends a
// malformed or truncated record makes Endpoint::fail(peer, reason), so
// awaiting tasks get Error(network) naming the peer. Buffers the kernel may
// still use are never freed: shutdown cancels and waits for completions.
//
// Round-trip cost: sends queued in a tick and receives re-armed after one
// reach the kernel in the same system call that then waits (io_uring
// submit-and-wait with deferred task work). Frames of 64 KiB and more go out
// from their own payload buffers (gathered, never copied into the record)
// and come in straight into the payload the receiver gets. A transport is
// driven by one thread: the first that polls or sends through it.
module;
#include "prelude.hpp"
export module mpcache.net:tcp;
import mpcache.core;
import mpcache.async;
import :frame;
import :endpoint;

export namespace mpcache {

using SteadyClock = std::chrono::steady_clock;

// Callbacks at points in time, run by the event loop that owns the queue.
class TimerQueue {
 public:
  void at(SteadyClock::time_point when, std::function<void()> fn) {
    timers_.emplace(when, std::move(fn));  // equal times keep insertion order
  }
  bool empty() const noexcept { return timers_.empty(); }
  std::optional<SteadyClock::time_point> next() const {
    if (timers_.empty()) return std::nullopt;
    return timers_.begin()->first;
  }
  // Runs every timer that is due; returns how many ran.
  std::size_t fire_due();

 private:
  std::multimap<SteadyClock::time_point, std::function<void()>> timers_;
};

// Timers as the only I/O source of a loop (the in-process transport): when
// nothing is runnable, the loop waits for the next timer.
class TimerLoop final : public IoSource {
 public:
  explicit TimerLoop(Scheduler& scheduler) : scheduler_(scheduler) { scheduler_.add_io_source(this); }
  ~TimerLoop() override { scheduler_.remove_io_source(this); }
  TimerLoop(const TimerLoop&) = delete;
  TimerLoop& operator=(const TimerLoop&) = delete;
  TimerQueue& timers() noexcept { return timers_; }
  bool has_pending() const override { return !timers_.empty(); }
  void poll(bool block) override;

 private:
  Scheduler& scheduler_;
  TimerQueue timers_;
};

// Per-direction AEAD keys of one encrypted connection (from the handshake).
struct ChannelKeys {
  std::array<std::uint8_t, 32> send{};
  std::array<std::uint8_t, 32> recv{};
};

// Connected sockets of one party, one per peer (fd -1 at the party itself).
struct Connections {
  std::vector<int> fds;
  std::vector<std::optional<ChannelKeys>> keys;  // empty or one per peer; nullopt: plain
  std::vector<std::string> names;                // how peers are named in errors
};

struct PartyAddress {
  std::string host;
  std::uint16_t port = 0;
};

struct ConnectOptions {
  std::chrono::milliseconds timeout{10000};  // the whole set-up
  bool encrypted = true;
  // Encrypted channels: this party's Ed25519 secret key (PEM) and every
  // party's public key (PEM, pinned; index = party id).
  std::string secret_key_pem;
  std::vector<std::string> public_keys_pem;
  // Called with one line for each connection the accepting side dropped
  // before it authenticated (a stranger, garbage, an idle socket); set-up
  // goes on waiting for the real peers. Nothing is printed by default.
  std::function<void(const std::string& line)> on_dropped;
};

// Listens on parties[self], connects to lower ids (retrying until they are
// up) and accepts higher ids; a hello on each connection checks party ids and
// the security mode; encrypted channels then run an ephemeral X25519
// exchange signed with the pinned Ed25519 keys. Throws Error(network) naming
// the peer and the reason (port in use, unreachable, wrong id, bad key).
Connections connect_cluster(PartyId self, const std::vector<PartyAddress>& parties,
                            const ConnectOptions& options);

// Tests: a full mesh of connected socket pairs inside this process;
// result[i] is party i's side. Plain (no keys).
std::vector<Connections> local_socket_mesh(std::size_t parties);

// A TCP port on `host` that is free right now (bind to port 0, close).
std::uint16_t free_tcp_port(const std::string& host = "127.0.0.1");

// Decodes the `count` frames of one plain record body; throws
// Error(protocol) unless they fill it exactly (used by the transport and by
// the fuzz target).
std::vector<Frame> decode_record_body(std::span<const std::byte> body, std::uint32_t count);

// A new Ed25519 key pair as PEM texts (secret, public).
std::pair<std::string, std::string> generate_party_key();

enum class TcpBackend { automatic, uring, asio };

struct TcpOptions {
  TcpBackend backend = TcpBackend::automatic;
  // A peer this party waits for that sends nothing for this long, or that
  // accepts none of our data for this long, is declared failed.
  std::chrono::milliseconds silence_timeout{10000};
  // Longest record accepted from a peer (a batch of frames, one tick).
  std::uint64_t max_record_bytes = std::uint64_t{1} << 33;
  // Low-latency mode: before it sleeps, a party with nothing to run polls
  // for completions for up to this long, yielding the CPU between polls
  // (0: sleep at once). Waking a sleeping thread costs tens of microseconds
  // when the message comes from another core; a polling party sees it in a
  // few. CPU cost: up to `spin` of CPU time per wait, i.e. a core kept busy
  // while rounds follow each other; the yield lets a peer sharing the core
  // run first.
  std::chrono::microseconds spin{0};
};

TcpBackend parse_backend(const std::string& name);  // "auto" | "uring" | "asio"

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
  // "tcp/io_uring" or "tcp/asio", plus "+aead" on encrypted channels.
  std::string name() const override;
  std::string backend() const;  // "io_uring" or "asio"
  // Why the automatic choice fell back to asio ("" when it did not).
  const std::string& fallback_reason() const noexcept { return fallback_reason_; }
  bool encrypted() const noexcept;

  bool has_pending() const override;
  void poll(bool block) override;
  void flush() override;

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

// Transport decorator emulating a Link (core's link model): holds each batch
// until it would have crossed the link (serialized at `bytes_per_s` behind
// earlier batches on the same direction, then RTT/2; every party pair has its
// own two directions), then hands it to the inner transport. Timer-driven through the
// event loop's TimerQueue: nothing sleeps while other work is runnable.
class LinkEmulator final : public Transport {
 public:
  LinkEmulator(Transport& inner, TimerQueue& timers, Link link)
      : inner_(inner), timers_(timers), link_(std::move(link)) {}
  void write(PartyId from, PartyId to, std::vector<Frame>&& batch) override;
  std::string name() const override { return inner_.name() + "+emulated-" + link_.name; }
  const Link& link() const noexcept { return link_; }

 private:
  Transport& inner_;
  TimerQueue& timers_;
  Link link_;
  std::map<std::pair<PartyId, PartyId>, SteadyClock::time_point> free_at_;
};

}  // namespace mpcache
