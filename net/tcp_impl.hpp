// TcpTransport::Impl: the TCP transport's state per peer and the steps its
// implementation units share. Each file holds one side of it:
//   tcp.cpp           set-up, the driver choice, the loop's hooks, fail()
//   tcp_send.cpp      records out: framing, sealing, one send in flight
//   tcp_receive.cpp   records in through the peer's RecordReader
//   tcp_wait.cpp      completions, spinning before sleeping, deadlines
//   tcp_shutdown.cpp  draining, cancelling, closing
// Included by those units after their imports; their global module fragment
// includes prelude.hpp, sys/aead.hpp, sys/io_driver.hpp and sys/send_queue.hpp.
// Functions defined here say `inline`: in a module's purview they are not
// implicitly, and each including unit would emit its own definition.
#pragma once

namespace mpcache {

struct TcpTransport::Impl {
  // Where a connection is; it only moves down this list.
  enum class PeerState {
    unconnected,  // no socket: this party's own slot, or not set up yet
    open,         // reads and writes allowed
    closed,       // shut down by this party: nothing new starts, completions still arrive
    failed,       // Endpoint::fail was called
  };

  struct Peer {
    int fd = -1;
    std::string name;
    PeerState state = PeerState::unconnected;
    inline bool open() const noexcept { return state == PeerState::open; }
    // send side: `sending` is in flight (from byte `sent`), `queued` waits
    sys::SendQueue sending;
    std::size_t sent = 0;
    bool send_inflight = false;
    sys::SendQueue queued;
    SteadyClock::time_point send_progress;
    std::uint64_t send_counter = 0;
    std::unique_ptr<sys::Aead> seal;
    // receive side: the receive in flight fills reader.space()
    RecordReader reader;
    bool recv_inflight = false;
    SteadyClock::time_point last_heard;
    std::optional<SteadyClock::time_point> waiting_since;
  };

  TcpTransport& self;
  TcpOptions options;
  std::unique_ptr<sys::IoDriver> driver;
  std::vector<Peer> peers;
  std::vector<sys::Completion> completions;
  std::vector<sys::ConstBuffer> gather;
  std::vector<sys::FdInterest> interest;  // scratch of wait_fds
  bool shut = false;
  bool encrypted = false;

  // Spinning before sleeping (tcp_wait.cpp): waits left with spinning paused.
  std::uint32_t spin_paused = 0;

  inline Impl(TcpTransport& s, TcpOptions o) : self(s), options(std::move(o)) {}

  inline PartyId me() const { return self.endpoint_.id(); }
  inline std::string who(PartyId p) const {
    return peers[p].name.empty() ? "party " + std::to_string(p) : peers[p].name;
  }

  // Completion tags: a peer's sends are even, its receives odd.
  static inline std::uint64_t send_tag(PartyId p) { return std::uint64_t(p) * 2; }
  static inline std::uint64_t recv_tag(PartyId p) { return std::uint64_t(p) * 2 + 1; }
  static inline bool is_receive(std::uint64_t tag) { return tag % 2 == 1; }

  // No new operations; what is in flight is cancelled (completions still
  // arrive), and the endpoint hears why once.
  void fail(PartyId p, const std::string& why);

  // tcp_send.cpp
  void append_record(PartyId p, std::vector<Frame>& batch);
  void start_send(PartyId p);
  void sent(PartyId p, long result);

  // tcp_receive.cpp
  void start_recv(PartyId p);
  void received(PartyId p, long result);
  bool deliver(PartyId p);

  // tcp_wait.cpp
  void complete(const sys::Completion& c);
  std::size_t collect(std::chrono::nanoseconds timeout);
  bool spin(std::chrono::nanoseconds limit);
  bool in_flight() const;
  std::chrono::nanoseconds check_deadlines();
  std::optional<SteadyClock::time_point> next_deadline(SteadyClock::time_point now) const;
};

// strerror of a completion's -errno.
inline std::string errno_text(long negative_errno) { return std::strerror(static_cast<int>(-negative_errno)); }

// An opener for one direction of an encrypted channel (tcp_receive.cpp).
std::unique_ptr<RecordOpener> aead_opener(const std::array<std::uint8_t, 32>& key);

}  // namespace mpcache
