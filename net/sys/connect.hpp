// Connection set-up between the parties of a job, in plain C++ (standalone
// asio): every party listens on its own address, connects to the parties
// with lower ids and accepts those with higher ids, one TCP connection per
// pair (TCP_NODELAY). Each connection starts with a hello naming both ends,
// so a peer with the wrong party id, a stale job or a different security
// mode is refused with a clear error. Errors are std::runtime_error.
//
// The accepting side never lets one stranger abort the job: connections that
// send a bad hello, fail the key exchange, close early or stay idle are
// dropped (reported through `on_dropped`) while the party keeps waiting for
// its real peers until the deadline; if they never come, the error lists
// what was dropped.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mpcache::sys {

struct PeerAddress {
  std::string host;
  std::uint16_t port = 0;
};

struct MeshOptions {
  std::chrono::milliseconds timeout{10000};      // whole set-up
  std::chrono::milliseconds retry_every{50};     // connect retries while the peer is not up
  bool encrypted = false;                         // both ends must agree
  // Called once per connection after the hello, with the connected
  // descriptor (blocking mode), the peer id and the time it must end by,
  // e.g. for a key exchange. A throw on an accepted connection drops it.
  std::function<void(int fd, std::uint32_t peer, std::chrono::steady_clock::time_point deadline)> after_hello;
  // A connection the accepting side dropped before it authenticated (one
  // line naming the remote address and the reason); none by default.
  std::function<void(const std::string& line)> on_dropped;
  // How long an accepted connection may take over its hello and key
  // exchange once its hello has arrived (bounded by the whole set-up).
  std::chrono::milliseconds authenticate_within{2000};
  // Unauthenticated connections held at once; the oldest is dropped beyond.
  std::size_t max_pending = 16;
};

// The peer closed or reset the connection (as opposed to a timeout).
struct PeerClosed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Returns one connected descriptor per party (-1 at `self`). The caller owns
// the descriptors. Throws std::runtime_error naming the peer and the reason.
std::vector<int> connect_mesh(std::uint32_t self, const std::vector<PeerAddress>& parties,
                              const MeshOptions& options);

// A listening socket bound to host:port, for tests and for picking free
// ports (port 0); returns the descriptor and writes the bound port.
int listen_on(const std::string& host, std::uint16_t& port);
// Writes/reads exactly `size` bytes on a blocking descriptor before
// `deadline`; throws std::runtime_error(what + reason) otherwise, PeerClosed
// when the peer closed or reset the connection.
void write_exactly(int fd, const void* data, std::size_t size,
                   std::chrono::steady_clock::time_point deadline, const std::string& what);
void read_exactly(int fd, void* data, std::size_t size,
                  std::chrono::steady_clock::time_point deadline, const std::string& what);

// A connected pair of stream sockets in this process (for tests).
std::pair<int, int> socket_pair();
void close_fd(int fd);
// host:port of a connected socket's peer ("a peer" when unknown), for logs.
std::string remote_of(int fd);

}  // namespace mpcache::sys
