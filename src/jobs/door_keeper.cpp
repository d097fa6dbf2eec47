// See door_keeper.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <sys/socket.h>
#include <unistd.h>
import mpcache;
#include "door_keeper.hpp"

namespace mpcache::jobs {
namespace {
// How many turned-away connections wait for their client to read why; past
// it, one is closed at once (a flood must not hold descriptors).
constexpr std::size_t max_turned_away = 256;
constexpr auto turned_away_for = std::chrono::seconds(1);

// "host:port" -> "host" ("[::1]:5000" -> "[::1]").
std::string host_of(const std::string& remote) {
  const auto colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
}
}  // namespace

DoorKeeper::DoorKeeper(ClientDoor& door, DoorLimits limits, std::function<void(ClientChannel)> admitted,
                       std::function<void(const std::string&)> log)
    : door_(door), limits_(limits), admitted_(std::move(admitted)), log_(std::move(log)),
      taker_([this](std::stop_token stop) { take_connections(stop); }) {}

DoorKeeper::~DoorKeeper() {
  taker_.request_stop();
  taker_.join();
  std::list<Handshake> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(handshakes_);
  }
  for (auto& h : left) h.thread.join();
  close_turned_away(true);
}

void DoorKeeper::take_connections(const std::stop_token& stop) {
  while (!stop.stop_requested()) {
    join_finished();
    close_turned_away(false);
    try {
      // A short wait, so a stop is seen soon.
      if (auto connection = door_.next_connection(std::chrono::steady_clock::now() + std::chrono::milliseconds(200)))
        start_handshake(std::move(*connection));
    } catch (const std::exception& e) {
      log_(std::string("client door: ") + e.what());
    }
  }
}

void DoorKeeper::start_handshake(PendingClient connection) {
  const std::string host = host_of(connection.remote);
  std::lock_guard lock(mutex_);
  std::string over;
  if (in_progress_ >= limits_.max_handshakes)
    over = std::to_string(in_progress_) + " handshakes in progress (at most " + std::to_string(limits_.max_handshakes) + ")";
  else if (in_progress_by_host_[host] >= limits_.per_host)
    over = std::to_string(in_progress_by_host_[host]) + " handshakes in progress from " + host + " (at most " +
           std::to_string(limits_.per_host) + " per host)";
  if (!over.empty()) {
    turn_away(connection, "busy: " + over + "; try again later");
    log_("refused a client connection from " + connection.remote + ": " + over);
    return;
  }
  ++in_progress_;
  ++in_progress_by_host_[host];
  auto it = handshakes_.emplace(handshakes_.end());
  // The thread cannot reach its entry before this lock is released.
  it->thread = std::thread([this, it, host, connection = std::move(connection)]() mutable {
    try {
      admitted_(door_.authenticate(std::move(connection), std::chrono::steady_clock::now() + limits_.handshake_within));
    } catch (const std::exception& e) {
      log_(e.what());
    }
    std::lock_guard done(mutex_);
    --in_progress_;
    if (--in_progress_by_host_[host] == 0) in_progress_by_host_.erase(host);
    it->finished = true;
  });
}

void DoorKeeper::turn_away(const PendingClient& connection, const std::string& why) {
  mpcache::turn_away(connection, why);
  if (turned_away_.size() >= max_turned_away) {
    close_descriptor(turned_away_.front().fd);
    turned_away_.pop_front();
  }
  turned_away_.push_back({connection.fd, std::chrono::steady_clock::now() + turned_away_for});
}

// Reads and drops what each turned-away client sent; closes it once the
// client closed its end, or its time is up (or `all`).
void DoorKeeper::close_turned_away(bool all) {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = turned_away_.begin(); it != turned_away_.end();) {
    bool done = all || now >= it->until;
    char sink[512];
    // A few reads a pass: a client that keeps sending cannot hold the
    // taker here (its time runs out all the same).
    for (int reads = 0; !done && reads < 8; ++reads) {
      const auto n = ::recv(it->fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n > 0) continue;
      done = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      break;
    }
    if (done) {
      close_descriptor(it->fd);
      it = turned_away_.erase(it);
    } else {
      ++it;
    }
  }
}

void DoorKeeper::join_finished() {
  std::list<Handshake> finished;
  {
    std::lock_guard lock(mutex_);
    for (auto it = handshakes_.begin(); it != handshakes_.end();) {
      auto next = std::next(it);
      if (it->finished) finished.splice(finished.end(), handshakes_, it);
      it = next;
    }
  }
  for (auto& h : finished) h.thread.join();
}

}  // namespace mpcache::jobs
