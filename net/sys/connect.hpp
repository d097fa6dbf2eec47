// Connection set-up between the parties of a job, in plain C++ (standalone
// asio): every party listens on its own address, connects to the parties
// with lower ids and accepts those with higher ids, one TCP connection per
// pair (TCP_NODELAY). Each connection starts with a hello naming both ends,
// so a peer with the wrong party id, a stale job or a different security
// mode is refused with a clear error. Errors are std::runtime_error.
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
  // descriptor (blocking mode) and the peer id, e.g. for a key exchange.
  std::function<void(int fd, std::uint32_t peer)> after_hello;
};

// Returns one connected descriptor per party (-1 at `self`). The caller owns
// the descriptors. Throws std::runtime_error naming the peer and the reason.
std::vector<int> connect_mesh(std::uint32_t self, const std::vector<PeerAddress>& parties,
                              const MeshOptions& options);

// A listening socket bound to host:port, for tests and for picking free
// ports (port 0); returns the descriptor and writes the bound port.
int listen_on(const std::string& host, std::uint16_t& port);
// Writes/reads exactly `size` bytes on a blocking descriptor before
// `deadline`; throws std::runtime_error(what + reason) otherwise.
void write_exactly(int fd, const void* data, std::size_t size,
                   std::chrono::steady_clock::time_point deadline, const std::string& what);
void read_exactly(int fd, void* data, std::size_t size,
                  std::chrono::steady_clock::time_point deadline, const std::string& what);

// A connected pair of stream sockets in this process (for tests).
std::pair<int, int> socket_pair();
void close_fd(int fd);

}  // namespace mpcache::sys
