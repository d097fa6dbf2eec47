// TCP transport (see modules/net/tcp.cppm): set-up (the driver, the
// channels' keys), the hooks the scheduler's loop calls, and failing a peer.
// The sides it drives are in tcp_send.cpp, tcp_receive.cpp, tcp_wait.cpp and
// tcp_shutdown.cpp (see tcp_impl.hpp).
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

void TcpTransport::Impl::fail(PartyId p, const std::string& why) {
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
    std::unique_ptr<RecordOpener> opener;
    if (I.encrypted) {
      peer.seal = std::make_unique<sys::Aead>(connections.keys[p]->send);
      opener = aead_opener(connections.keys[p]->recv);
    }
    peer.reader = RecordReader({.max_record_bytes = options.max_record_bytes}, std::move(opener));
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

}  // namespace mpcache
