// Shutting the TCP transport down: queued sends drain (bounded by the
// silence timeout), then whatever is still in flight is cancelled and every
// completion awaited before a socket is closed or a buffer freed, since the
// kernel may use them until then.
module;
#include "prelude.hpp"
#include "sys/aead.hpp"
#include "sys/connect.hpp"
#include "sys/io_driver.hpp"
#include "sys/send_queue.hpp"
module mpcache.net;
import mpcache.core;
import mpcache.async;
#include "tcp_impl.hpp"

namespace mpcache {

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
      peer.reader.leak();
      peer.fd = -1;
      continue;
    }
    I.driver->remove_fd(peer.fd);
    sys::close_fd(peer.fd);
    peer.fd = -1;
  }
}

}  // namespace mpcache
