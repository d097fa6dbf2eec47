// The TCP transport's waiting: completions handed to the send and receive
// sides, a short spin before the thread sleeps, and the deadlines that fail
// a silent or stalled peer.
module;
#include "prelude.hpp"
#include <cstdio>
#include <thread>
#include "sys/aead.hpp"
#include "sys/io_driver.hpp"
#include "sys/send_queue.hpp"
module mpcache.net;
import mpcache.core;
import mpcache.async;
#include "tcp_impl.hpp"

namespace mpcache {

namespace {

std::string secs(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// See spin().
constexpr std::chrono::microseconds late_yield{2000};
constexpr std::uint32_t spin_pause = 64;

}  // namespace

void TcpTransport::Impl::complete(const sys::Completion& c) {
  const PartyId p = static_cast<PartyId>(c.tag / 2);
  if (p >= peers.size()) return;
  if (is_receive(c.tag)) {
    received(p, c.result);
  } else {
    sent(p, c.result);
  }
}

// Submits what is queued, waits up to `timeout` and handles what
// completed; returns how many of the completions may have woken a task:
// receives and failures (a send that went out wakes nobody).
std::size_t TcpTransport::Impl::collect(std::chrono::nanoseconds timeout) {
  completions.clear();
  driver->wait(timeout, completions);
  std::size_t wakes = 0;
  for (const auto& c : completions) {
    complete(c);
    if (is_receive(c.tag) || c.result < 0) ++wakes;
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
bool TcpTransport::Impl::spin(std::chrono::nanoseconds limit) {
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

bool TcpTransport::Impl::in_flight() const {
  for (const auto& peer : peers)
    if (peer.send_inflight || peer.recv_inflight) return true;
  return false;
}

// Deadlines; returns the time until the next one could expire (zero when
// one expired now: the woken tasks should run before anything blocks).
std::chrono::nanoseconds TcpTransport::Impl::check_deadlines() {
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
std::optional<SteadyClock::time_point> TcpTransport::Impl::next_deadline(SteadyClock::time_point now) const {
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

}  // namespace mpcache
