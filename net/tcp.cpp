// TCP transport (see modules/net/tcp.cppm): records out and in (:records),
// one send and one receive in flight per socket, deadlines, graceful and
// forced shutdown.
module;
#include "prelude.hpp"
#include <cerrno>
#include <cstdio>
#include <thread>
#include "sys/aead.hpp"
#include "sys/byte_buffer.hpp"
#include "sys/fresh_payload.hpp"
#include "sys/send_queue.hpp"
#include "sys/connect.hpp"
#include "sys/io_driver.hpp"
module mpcache.net;
import mpcache.core;
import mpcache.async;
import :records;

namespace mpcache {

namespace {

constexpr std::size_t min_recv_chunk = 256 * 1024;
constexpr std::size_t max_recv_ahead = 64u << 20;
constexpr std::size_t keep_recv_buffer = std::size_t{1} << 30;
// Payloads from this size on are sent from their own memory (gathered).
constexpr std::size_t direct_send_min = 64 * 1024;
// Records from this size on are taken frame by frame, big payloads received
// straight into the vector the receiver gets.
constexpr std::uint64_t stream_min = 1024 * 1024;

std::string errno_text(long negative_errno) {
  return std::strerror(static_cast<int>(-negative_errno));
}

std::string secs(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace

std::vector<std::string> tcp_backend_names() {
  std::vector<std::string> names{"auto"};
  for (const auto& d : sys::io_drivers()) names.push_back(d.name);
  return names;
}

std::string parse_backend(const std::string& name) {
  if (name == "auto") return name;
  for (const auto& d : sys::io_drivers())
    if (d.name == name || std::find(d.aliases.begin(), d.aliases.end(), name) != d.aliases.end()) return d.name;
  std::string known;
  for (const auto& n : tcp_backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::invalid_argument, "unknown transport backend '" + name + "' (" + known + ")");
}

struct TcpTransport::Impl {
  // A record too big to hold whole before parsing (body >= stream_min): its
  // frames are taken one at a time, big payloads straight from the socket
  // into the vector the receiver gets. Frames are delivered once the whole
  // record is in and, on encrypted channels, authenticated.
  struct Streaming {
    bool active = false;
    std::array<std::byte, record_header_bytes> header{};
    std::uint32_t count = 0;
    std::uint64_t body = 0;
    std::uint64_t left = 0;  // body bytes still to come (frames, then the tag)
    std::vector<Frame> frames;
    bool in_payload = false;  // frames.back().payload is being filled
    std::size_t filled = 0;
  };

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
    bool open() const noexcept { return state == PeerState::open; }
    // send side: `sending` is in flight (from byte `sent`), `queued` waits
    sys::SendQueue sending;
    std::size_t sent = 0;
    bool send_inflight = false;
    sys::SendQueue queued;
    SteadyClock::time_point send_progress;
    std::uint64_t send_counter = 0;
    std::unique_ptr<sys::Aead> seal;
    // receive side
    sys::ByteBuffer rx;
    std::size_t have = 0;
    bool recv_inflight = false;
    bool recv_direct = false;  // the receive in flight fills streaming.frames.back()
    Streaming streaming;
    SteadyClock::time_point last_heard;
    std::optional<SteadyClock::time_point> waiting_since;
    std::uint64_t recv_counter = 0;
    std::unique_ptr<sys::Aead> unseal;
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

  Impl(TcpTransport& s, TcpOptions o) : self(s), options(o) {}

  PartyId me() const { return self.endpoint_.id(); }
  std::string who(PartyId p) const {
    return peers[p].name.empty() ? "party " + std::to_string(p) : peers[p].name;
  }

  // No new operations; what is in flight is cancelled (completions still
  // arrive), and the endpoint hears why once.
  void fail(PartyId p, const std::string& why) {
    Peer& peer = peers[p];
    if (peer.state == PeerState::failed) return;
    const bool was_open = peer.open();
    peer.state = PeerState::failed;
    if (was_open && (peer.send_inflight || peer.recv_inflight)) {
      driver->cancel(peer.fd);
      driver->submit();
    }
    self.endpoint_.fail(p, why);
  }

  void start_send(PartyId p) {
    Peer& peer = peers[p];
    if (!peer.open() || peer.send_inflight) return;
    if (peer.sent == peer.sending.bytes()) {
      if (peer.queued.empty()) return;
      peer.sending.swap(peer.queued);
      peer.queued.clear();
      peer.sent = 0;
    }
    peer.send_inflight = true;
    peer.send_progress = SteadyClock::now();
    peer.sending.unsent(peer.sent, gather);
    driver->send(peer.fd, gather, std::uint64_t(p) * 2);
  }

  void start_recv(PartyId p) {
    Peer& peer = peers[p];
    if (!peer.open() || peer.recv_inflight) return;
    Streaming& st = peer.streaming;
    if (st.active && st.in_payload && peer.have == 0) {
      // Straight into the payload the receiver gets: no copy.
      auto& payload = st.frames.back().payload;
      peer.recv_inflight = peer.recv_direct = true;
      driver->recv(peer.fd, payload.data() + st.filled, payload.size() - st.filled,
                   std::uint64_t(p) * 2 + 1);
      return;
    }
    // Room for the rest of the current record, at most 64 MiB ahead of the
    // data (a bogus length cannot make us allocate much up front), or the
    // next chunk. The buffer keeps its size for the next records: fresh
    // memory costs page faults on every big message.
    std::size_t want = peer.have + min_recv_chunk;
    if (!st.active && peer.have >= record_header_bytes) {
      const std::uint64_t need = record_header_bytes + get_u64(peer.rx.data() + 8);
      if (need > peer.have)
        want = static_cast<std::size_t>(std::min<std::uint64_t>(
            need, std::max<std::uint64_t>(peer.have * 2, peer.have + max_recv_ahead)));
    }
    if (peer.rx.size() < want) peer.rx.resize(want);
    // Inside a streaming record, read only a chunk into rx: the big payloads
    // that follow should go straight to their vectors.
    const std::size_t room = st.active ? min_recv_chunk : peer.rx.size() - peer.have;
    peer.recv_inflight = true;
    peer.recv_direct = false;
    driver->recv(peer.fd, peer.rx.data() + peer.have, room, std::uint64_t(p) * 2 + 1);
  }

  // Queues one record; payloads of direct_send_min bytes or more are moved
  // into the queue and sent from their own memory.
  void append_record(PartyId p, std::vector<Frame>& batch) {
    Peer& peer = peers[p];
    std::uint64_t body = encrypted ? sys::aead_tag_bytes : 0;
    for (const auto& f : batch) body += frame_header_bytes + f.payload.size();
    auto& out = peer.queued;
    const std::size_t first_piece = out.start_record();
    std::byte* h = out.append_copied(record_header_bytes);
    put_u32(h, record_magic);
    put_u32(h + 4, static_cast<std::uint32_t>(batch.size()));
    put_u64(h + 8, body);
    for (auto& f : batch) {
      const auto fh = FrameHeader{f.stream, static_cast<std::uint32_t>(f.payload.size()), f.clock}.encode();
      if (f.payload.size() >= direct_send_min) {
        std::memcpy(out.append_copied(fh.size()), fh.data(), fh.size());
        out.append_owned(std::move(f.payload));
      } else {
        std::byte* w = out.append_copied(fh.size() + f.payload.size());
        std::memcpy(w, fh.data(), fh.size());
        if (!f.payload.empty()) std::memcpy(w + fh.size(), f.payload.data(), f.payload.size());
      }
    }
    if (encrypted) {
      // Seal in place, piece by piece: everything after the record header
      // up to the tag, which goes last.
      out.append_copied(sys::aead_tag_bytes);  // the tag's room, filled below
      auto header = out.piece(first_piece);
      peer.seal->begin_seal(peer.send_counter++, header.data(), record_header_bytes);
      std::uint64_t plain = body - sys::aead_tag_bytes;
      std::size_t skip = record_header_bytes;
      for (std::size_t i = first_piece; i < out.piece_count() && plain > 0; ++i) {
        auto s = out.piece(i).subspan(skip);
        skip = 0;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(plain, s.size()));
        peer.seal->seal_piece(s.data(), n);
        plain -= n;
      }
      auto last = out.piece(out.piece_count() - 1);
      peer.seal->finish_seal(last.data() + last.size() - sys::aead_tag_bytes);
    }
    self.wire_sent_ += record_header_bytes + body;
  }

  void malformed(PartyId p, const std::string& what) {
    fail(p, who(p) + " sent a malformed record (" + what + ")");
  }
  void unfilled(PartyId p) {
    const Streaming& st = peers[p].streaming;
    malformed(p, std::to_string(st.count) + " frames do not fill its " + std::to_string(st.body) + " bytes");
  }

  // Parses what rx holds: whole small records, or the next pieces of a
  // streaming one. False after failing the peer.
  bool parse(PartyId p) {
    Peer& peer = peers[p];
    std::size_t at = 0;
    bool ok = true;
    while (ok) {
      if (peer.streaming.active) {
        const Step step = stream_complete(peer.streaming) ? finish_stream(p, at) : stream_step(p, at);
        if (step == Step::failed) ok = false;
        if (step != Step::progress) break;
        continue;
      }
      if (peer.have - at < record_header_bytes) break;
      std::byte* h = peer.rx.data() + at;
      if (get_u32(h) != record_magic) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "0x%08x", get_u32(h));
        fail(p, who(p) + " sent malformed data (bad record magic " + buf + "; not an mpcache peer or a corrupted stream)");
        ok = false;
        break;
      }
      const std::uint32_t count = get_u32(h + 4);
      const std::uint64_t body = get_u64(h + 8);
      if (body > options.max_record_bytes || (encrypted && body < sys::aead_tag_bytes)) {
        fail(p, who(p) + " sent a malformed record of " + std::to_string(body) +
                    " bytes (limit " + std::to_string(options.max_record_bytes) + ")");
        ok = false;
        break;
      }
      if (body >= stream_min && peer.have - at - record_header_bytes < body) {
        start_stream(p, h, count, body);
        at += record_header_bytes;
        continue;
      }
      if (peer.have - at - record_header_bytes < body) break;  // incomplete
      std::byte* b = h + record_header_bytes;
      std::size_t plain = static_cast<std::size_t>(body);
      if (encrypted) {
        plain -= sys::aead_tag_bytes;
        if (!peer.unseal->open(peer.recv_counter++, h, record_header_bytes, b, plain, b + plain)) {
          fail(p, who(p) + ": record " + std::to_string(peer.recv_counter - 1) +
                      " failed authentication (altered, replayed or reordered data refused)");
          ok = false;
          break;
        }
      }
      std::vector<Frame> frames;
      try {
        frames = decode_record_body(std::span<const std::byte>(b, plain), count);
      } catch (const Error& e) {
        malformed(p, e.what());
        ok = false;
        break;
      }
      at += record_header_bytes + static_cast<std::size_t>(body);
      if (!frames.empty()) self.endpoint_.deliver(p, std::move(frames));
    }
    if (at > 0) {
      std::memmove(peer.rx.data(), peer.rx.data() + at, peer.have - at);
      peer.have -= at;
      // Reuse the buffer, unless it grew past 1 GiB for one huge record.
      if (peer.rx.size() > keep_recv_buffer && peer.have < min_recv_chunk) {
        peer.rx.resize(peer.have);
        peer.rx.shrink(min_recv_chunk);
      }
    }
    return ok;
  }

  void start_stream(PartyId p, const std::byte* header, std::uint32_t count, std::uint64_t body) {
    Peer& peer = peers[p];
    Streaming& st = peer.streaming;
    st = Streaming{};
    st.active = true;
    std::memcpy(st.header.data(), header, record_header_bytes);
    st.count = count;
    st.body = st.left = body;
    st.frames.reserve(std::min<std::size_t>(count, static_cast<std::size_t>(body / frame_header_bytes)));
    if (encrypted) peer.unseal->begin_open(peer.recv_counter, st.header.data(), record_header_bytes);
  }

  static bool stream_complete(const Streaming& st) {
    return !st.in_payload && st.frames.size() == st.count;
  }

  std::uint64_t plain_left(const Streaming& st) const {
    const std::uint64_t tag = encrypted ? sys::aead_tag_bytes : 0;
    return st.left >= tag ? st.left - tag : 0;
  }

  // Decrypts body bytes that arrived, in order (each exactly once).
  void take_body(Peer& peer, std::byte* data, std::size_t n) {
    if (encrypted) peer.unseal->open_piece(data, n);
    peer.streaming.left -= n;
  }

  enum class Step { progress, need_bytes, failed };

  // Moves a streaming record on by what rx holds from `at`: the rest of the
  // current payload, or the next frame header.
  Step stream_step(PartyId p, std::size_t& at) {
    Peer& peer = peers[p];
    Streaming& st = peer.streaming;
    if (st.in_payload) {
      auto& payload = st.frames.back().payload;
      const std::size_t n = std::min(payload.size() - st.filled, peer.have - at);
      if (n == 0) return Step::need_bytes;
      std::memcpy(payload.data() + st.filled, peer.rx.data() + at, n);
      take_body(peer, payload.data() + st.filled, n);
      st.filled += n;
      at += n;
      if (st.filled == payload.size()) st.in_payload = false;
      return Step::progress;
    }
    if (plain_left(st) < frame_header_bytes) {
      unfilled(p);
      return Step::failed;
    }
    if (peer.have - at < frame_header_bytes) return Step::need_bytes;
    std::byte* fhb = peer.rx.data() + at;
    take_body(peer, fhb, frame_header_bytes);
    at += frame_header_bytes;
    const FrameHeader fh = FrameHeader::decode(fhb);
    if (fh.length > plain_left(st)) {
      malformed(p, "a frame of " + std::to_string(fh.length) + " bytes overruns its " +
                       std::to_string(st.body) + " bytes");
      return Step::failed;
    }
    // Zero-filled by std::vector; the socket then writes it once more.
    st.frames.push_back(Frame{fh.stream, fh.clock, sys::fresh_payload(fh.length)});
    st.in_payload = fh.length > 0;
    st.filled = 0;
    return Step::progress;
  }

  // Every frame is in: check that they fill the body, authenticate, deliver.
  Step finish_stream(PartyId p, std::size_t& at) {
    Peer& peer = peers[p];
    Streaming& st = peer.streaming;
    if (plain_left(st) != 0) {
      unfilled(p);
      return Step::failed;
    }
    if (encrypted) {
      if (peer.have - at < sys::aead_tag_bytes) return Step::need_bytes;  // the tag is still coming
      const bool authentic = peer.unseal->finish_open(peer.rx.data() + at);
      at += sys::aead_tag_bytes;
      st.left = 0;
      if (!authentic) {
        fail(p, who(p) + ": record " + std::to_string(peer.recv_counter) +
                    " failed authentication (altered, replayed or reordered data refused)");
        return Step::failed;
      }
      ++peer.recv_counter;
    }
    std::vector<Frame> frames = std::move(st.frames);
    st = Streaming{};
    if (!frames.empty()) self.endpoint_.deliver(p, std::move(frames));
    return Step::progress;
  }

  void complete(const sys::Completion& c) {
    const PartyId p = static_cast<PartyId>(c.tag / 2);
    const bool is_recv = c.tag % 2 == 1;
    if (p >= peers.size()) return;
    Peer& peer = peers[p];
    if (is_recv) {
      peer.recv_inflight = false;
      if (c.result > 0) {
        const auto n = static_cast<std::size_t>(c.result);
        peer.last_heard = SteadyClock::now();
        if (peer.recv_direct) {
          Streaming& st = peer.streaming;
          auto& payload = st.frames.back().payload;
          take_body(peer, payload.data() + st.filled, n);
          st.filled += n;
          if (st.filled == payload.size()) st.in_payload = false;
        } else {
          peer.have += n;
        }
        if (!peer.open()) return;
        if (parse(p)) start_recv(p);
      } else if (c.result == 0) {
        if (!peer.open()) return;
        const Streaming& st = peer.streaming;
        if (st.active) {
          fail(p, who(p) + " closed the connection in the middle of a message (truncated: got " +
                      std::to_string(record_header_bytes + st.body - st.left + peer.have) + " of " +
                      std::to_string(record_header_bytes + st.body) + " bytes)");
        } else if (peer.have > 0) {
          std::string expect;
          if (peer.have >= record_header_bytes)
            expect = " of " + std::to_string(record_header_bytes + get_u64(peer.rx.data() + 8));
          fail(p, who(p) + " closed the connection in the middle of a message (truncated: got " +
                      std::to_string(peer.have) + expect + " bytes)");
        } else {
          // A clean close: fine if nothing more is needed from that peer.
          fail(p, who(p) + " closed the connection");
        }
      } else if (c.result != -ECANCELED || peer.open()) {
        fail(p, "connection to " + who(p) + " lost: " + errno_text(c.result));
      }
    } else {
      peer.send_inflight = false;
      if (c.result >= 0) {
        peer.sent += static_cast<std::size_t>(c.result);
        peer.send_progress = SteadyClock::now();
        if (peer.sent == peer.sending.bytes()) {
          peer.sending.clear();
          peer.sent = 0;
        }
        start_send(p);
      } else if (c.result != -ECANCELED || peer.open()) {
        fail(p, "sending to " + who(p) + " failed: " + errno_text(c.result));
      }
    }
  }

  // Submits what is queued, waits up to `timeout` and handles what
  // completed; returns how many of the completions may have woken a task:
  // receives and failures (a send that went out wakes nobody).
  std::size_t collect(std::chrono::nanoseconds timeout) {
    completions.clear();
    driver->wait(timeout, completions);
    std::size_t wakes = 0;
    for (const auto& c : completions) {
      complete(c);
      if (c.tag % 2 == 1 || c.result < 0) ++wakes;
    }
    return wakes;
  }

  // Polls for completions, yielding the CPU in between, for up to the spin
  // budget (and at most `limit`) before the caller sleeps. True when
  // something completed that may have woken a task (then it must not sleep).
  //
  // A yield hands the core to whatever else is runnable. A peer party
  // sharing the core runs a round's work and yields back, but a busy
  // process (a build, another service) keeps it for a whole time slice,
  // milliseconds: then spinning costs far more than sleeping in the kernel,
  // which wakes us as soon as data arrives. So a yield that comes back
  // after more than a slice's worth (2 ms; a peer party's round of work is
  // far shorter) pauses spinning for the next spin_pause waits; the first
  // wait after that probes again. (500 us and 256 waits paused too often
  // among three parties on two cores: sort-1024 of the ops preset took
  // 0.036 s instead of 0.030.)
  static constexpr std::chrono::microseconds late_yield{2000};
  static constexpr std::uint32_t spin_pause = 64;
  std::uint32_t spin_paused = 0;

  bool spin(std::chrono::nanoseconds limit) {
    if (spin_paused > 0) {
      --spin_paused;
      return false;
    }
    const auto until = SteadyClock::now() + std::min<std::chrono::nanoseconds>(options.spin, limit);
    for (;;) {
      if (collect(std::chrono::nanoseconds{0}) > 0) return true;
      const auto before = SteadyClock::now();
      if (before >= until) return false;
      std::this_thread::yield();  // a peer sharing this core runs first
      if (SteadyClock::now() - before > late_yield) {
        spin_paused = spin_pause;
        return collect(std::chrono::nanoseconds{0}) > 0;
      }
    }
  }

  bool in_flight() const {
    for (const auto& peer : peers)
      if (peer.send_inflight || peer.recv_inflight) return true;
    return false;
  }

  // Deadlines; returns the time until the next one could expire (zero when
  // one expired now: the woken tasks should run before anything blocks).
  std::chrono::nanoseconds check_deadlines() {
    const auto now = SteadyClock::now();
    const auto limit = options.silence_timeout;
    bool expired = false;
    for (PartyId p = 0; p < peers.size(); ++p) {
      Peer& peer = peers[p];
      if (!peer.open()) continue;
      if (self.endpoint_.waiting_on(p)) {
        if (!peer.waiting_since) peer.waiting_since = now;
        if (now - std::max(*peer.waiting_since, peer.last_heard) >= limit) {
          fail(p, who(p) + " sent nothing for " + secs(limit) + " while " + "party " +
                      std::to_string(me()) + " waited for it (silent peer; deadline exceeded)");
          expired = true;
          continue;
        }
      } else {
        peer.waiting_since.reset();
      }
      if (peer.send_inflight && now - peer.send_progress >= limit) {
        fail(p, who(p) + " accepted no data for " + secs(limit) +
                    " (peer stalled or not reading; deadline exceeded)");
        expired = true;
      }
    }
    if (expired) return std::chrono::nanoseconds{0};
    const auto next = next_deadline(now);
    return next ? std::chrono::nanoseconds(*next - now) : std::chrono::nanoseconds(limit);
  }

  // When the next deadline could expire: a peer a task waits on that stays
  // silent (a wait that just began counts from `now`), a send that makes no
  // progress.
  std::optional<SteadyClock::time_point> next_deadline(SteadyClock::time_point now) const {
    const auto limit = options.silence_timeout;
    std::optional<SteadyClock::time_point> next;
    auto earliest = [&](SteadyClock::time_point t) {
      if (!next || t < *next) next = t;
    };
    for (PartyId p = 0; p < peers.size(); ++p) {
      const Peer& peer = peers[p];
      if (!peer.open()) continue;
      if (self.endpoint_.waiting_on(p))
        earliest(std::max(peer.waiting_since.value_or(now), peer.last_heard) + limit);
      if (peer.send_inflight) earliest(peer.send_progress + limit);
    }
    return next;
  }
};

TcpTransport::TcpTransport(Scheduler& scheduler, Endpoint& endpoint, Connections connections,
                           TcpOptions options)
    : impl_(std::make_unique<Impl>(*this, options)), scheduler_(scheduler), endpoint_(endpoint) {
  auto& I = *impl_;
  const std::size_t n = endpoint.parties();
  auto close_all = [&] {
    for (int fd : connections.fds) sys::close_fd(fd);
  };
  if (connections.fds.size() != n) {
    close_all();
    throw Error(ErrorCode::invalid_argument, "TCP transport: " + std::to_string(connections.fds.size()) +
                                                 " sockets for " + std::to_string(n) + " parties");
  }
  std::string wanted;
  try {
    wanted = parse_backend(options.backend);
  } catch (...) {
    close_all();
    throw;
  }
  for (const auto& d : sys::io_drivers()) {
    if (wanted != "auto" && d.name != wanted) continue;
    try {
      I.driver = d.make();
      break;
    } catch (const std::exception& e) {
      if (wanted != "auto") {
        close_all();
        throw Error(ErrorCode::network, d.name + " transport unavailable: " + e.what());
      }
      if (fallback_reason_.empty()) fallback_reason_ = e.what();
    }
  }
  if (!I.driver) {
    close_all();
    throw Error(ErrorCode::network, "no transport driver could start (" + fallback_reason_ + ")");
  }
  I.peers.resize(n);
  const auto now = SteadyClock::now();
  bool any_keys = false, all_keys = true;
  for (PartyId p = 0; p < n; ++p) {
    if (p == endpoint.id()) continue;
    const bool has = p < connections.keys.size() && connections.keys[p].has_value();
    any_keys = any_keys || has;
    all_keys = all_keys && has;
  }
  if (any_keys && !all_keys) {
    close_all();
    throw Error(ErrorCode::invalid_argument, "TCP transport: some channels have keys, some not");
  }
  I.encrypted = any_keys;
  for (PartyId p = 0; p < n; ++p) {
    auto& peer = I.peers[p];
    if (p < connections.names.size()) peer.name = connections.names[p];
    if (p == endpoint.id()) {
      if (connections.fds[p] >= 0) sys::close_fd(connections.fds[p]);
      continue;
    }
    peer.fd = connections.fds[p];
    if (peer.fd < 0) {
      peer.state = Impl::PeerState::failed;
      endpoint.fail(p, "no connection to " + I.who(p));
      continue;
    }
    I.driver->add_fd(peer.fd);
    peer.state = Impl::PeerState::open;
    peer.last_heard = now;
    if (I.encrypted) {
      peer.seal = std::make_unique<sys::Aead>(connections.keys[p]->send);
      peer.unseal = std::make_unique<sys::Aead>(connections.keys[p]->recv);
    }
  }
  // Submitted by the first poll or flush, from the thread that drives us.
  for (PartyId p = 0; p < n; ++p) I.start_recv(p);
  endpoint.attach(this);
  scheduler.add_io_source(this);
}

TcpTransport::~TcpTransport() {
  try {
    shutdown();
  } catch (...) {
  }
  scheduler_.remove_io_source(this);
  if (endpoint_.transport() == this) endpoint_.attach(nullptr);
}

std::string TcpTransport::backend() const { return impl_->driver->name(); }
bool TcpTransport::encrypted() const noexcept { return impl_->encrypted; }
std::string TcpTransport::name() const {
  return "tcp/" + backend() + (impl_->encrypted ? "+aead" : "");
}

void TcpTransport::write(PartyId from, PartyId to, std::vector<Frame>&& batch) {
  auto& I = *impl_;
  if (from != endpoint_.id() || to >= I.peers.size() || to == from)
    throw Error(ErrorCode::bad_party, "TCP transport of party " + std::to_string(endpoint_.id()) +
                                          " cannot carry " + std::to_string(from) + " -> " +
                                          std::to_string(to));
  auto& peer = I.peers[to];
  if (!peer.open()) return;  // the endpoint already knows the link failed
  I.append_record(to, batch);
  I.start_send(to);  // queued; leaves with the loop's next poll or flush
}

void TcpTransport::flush() { impl_->driver->submit(); }

bool TcpTransport::has_pending() const { return impl_->in_flight() || !timers_.empty(); }

bool TcpTransport::wait_fds(std::vector<WaitFd>& out) {
  auto& I = *impl_;
  I.check_deadlines();
  I.interest.clear();
  if (!I.driver->wait_fds(I.interest)) return false;
  for (const auto& f : I.interest) out.push_back(WaitFd{f.fd, f.read, f.write});
  return true;
}

std::optional<SteadyClock::time_point> TcpTransport::next_wake() const {
  auto& I = *impl_;
  const auto now = SteadyClock::now();
  if (I.driver->ready()) return now;
  auto wake = I.next_deadline(now);
  if (auto t = timers_.next(); t && (!wake || *t < *wake)) wake = t;
  return wake;
}

std::chrono::nanoseconds TcpTransport::spin_budget() const { return impl_->options.spin; }

void TcpTransport::poll(bool block) {
  auto& I = *impl_;
  std::chrono::nanoseconds timeout{0};
  if (block) {
    timeout = I.check_deadlines();
    if (auto t = timers_.next())
      timeout = std::min<std::chrono::nanoseconds>(timeout, *t - SteadyClock::now());
    // Zero only collects (a deadline just woke tasks); otherwise block.
    if (timeout.count() < 0) timeout = std::chrono::nanoseconds{1};
    const bool woke = timeout.count() > 0 && I.options.spin.count() > 0 && I.spin(timeout);
    // The spin collected what there is; another look would only cost a system call.
    if (!woke) I.collect(timeout);
  } else {
    I.collect(timeout);
  }
  timers_.fire_due();
  I.check_deadlines();
}

void TcpTransport::shutdown() {
  auto& I = *impl_;
  if (I.shut) return;
  I.shut = true;
  const auto limit = I.options.silence_timeout;
  // 1. Let emulated links and queued sends drain.
  auto sends_pending = [&] {
    if (!timers_.empty()) return true;
    for (auto& peer : I.peers)
      if (peer.open() && (peer.send_inflight || !peer.queued.empty())) return true;
    return false;
  };
  auto deadline = SteadyClock::now() + limit;
  while (sends_pending() && SteadyClock::now() < deadline) {
    auto timeout = std::chrono::nanoseconds(std::chrono::milliseconds(50));
    if (auto t = timers_.next())
      timeout = std::min<std::chrono::nanoseconds>(timeout, *t - SteadyClock::now());
    I.collect(std::max(timeout, std::chrono::nanoseconds{1}));
    timers_.fire_due();
    I.check_deadlines();
  }
  // 2. Cancel what is still in flight and wait for every completion: the
  //    kernel may be using the buffers until then.
  for (PartyId p = 0; p < I.peers.size(); ++p) {
    auto& peer = I.peers[p];
    if (peer.fd < 0) continue;
    if (peer.open()) {
      peer.state = Impl::PeerState::closed;
      if (peer.send_inflight || peer.recv_inflight) I.driver->cancel(peer.fd);
    }
  }
  I.driver->submit();
  deadline = SteadyClock::now() + limit;
  while (I.in_flight() && SteadyClock::now() < deadline) I.collect(std::chrono::milliseconds(50));
  for (auto& peer : I.peers) {
    if (peer.fd < 0) continue;
    if (peer.send_inflight || peer.recv_inflight) {
      // The kernel never answered the cancel: leak the buffers rather than
      // free memory it may still write to, and keep the descriptor open.
      peer.sending.leak();
      peer.rx.leak();
      if (peer.recv_direct) (void)new std::vector<Frame>(std::move(peer.streaming.frames));  // never freed
      peer.fd = -1;
      continue;
    }
    I.driver->remove_fd(peer.fd);
    sys::close_fd(peer.fd);
    peer.fd = -1;
  }
}

}  // namespace mpcache
