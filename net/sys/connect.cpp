#include "connect.hpp"
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <array>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <asio.hpp>

namespace mpcache::sys {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t hello_magic = 0x4843504Du;  // "MPCH"
constexpr std::uint16_t hello_version = 1;
constexpr std::size_t hello_bytes = 16;

std::string where(const PeerAddress& a) { return a.host + ":" + std::to_string(a.port); }
std::string party(std::uint32_t id) { return "party " + std::to_string(id); }

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

struct Hello {
  std::uint32_t from = 0, to = 0;
  bool encrypted = false;
  std::array<unsigned char, hello_bytes> encode() const {
    std::array<unsigned char, hello_bytes> b{};
    auto put32 = [&](std::size_t at, std::uint32_t v) {
      for (int i = 0; i < 4; ++i) b[at + i] = static_cast<unsigned char>(v >> (8 * i));
    };
    put32(0, hello_magic);
    b[4] = hello_version & 0xFF;
    b[5] = hello_version >> 8;
    b[6] = encrypted ? 1 : 0;
    put32(8, from);
    put32(12, to);
    return b;
  }
};

std::uint32_t get32(const unsigned char* b) {
  return std::uint32_t(b[0]) | std::uint32_t(b[1]) << 8 | std::uint32_t(b[2]) << 16 |
         std::uint32_t(b[3]) << 24;
}

// Checks the peer's hello; `expected` is the peer id, or nullopt on the
// accepting side (any higher id not yet connected, checked by the caller).
Hello check_hello(const unsigned char* b, std::uint32_t self, std::optional<std::uint32_t> expected,
                  bool encrypted, const std::string& peer_desc) {
  if (get32(b) != hello_magic)
    throw std::runtime_error(party(self) + ": " + peer_desc +
                             " is not an mpcache party (bad hello magic)");
  const unsigned version = unsigned(b[4]) | unsigned(b[5]) << 8;
  if (version != hello_version)
    throw std::runtime_error(party(self) + ": " + peer_desc + " speaks protocol version " +
                             std::to_string(version) + ", this party " +
                             std::to_string(hello_version));
  Hello h{get32(b + 8), get32(b + 12), b[6] != 0};
  if (expected && h.from != *expected)
    throw std::runtime_error(party(self) + ": expected " + party(*expected) + " at " + peer_desc +
                             " but it says it is " + party(h.from) +
                             " (wrong party id; check the cluster config)");
  if (h.to != self)
    throw std::runtime_error(party(self) + ": " + party(h.from) + " at " + peer_desc +
                             " wants to talk to " + party(h.to) +
                             " (wrong party id; check the cluster config)");
  if (h.encrypted != encrypted)
    throw std::runtime_error(party(self) + ": " + party(h.from) + " at " + peer_desc + " runs " +
                             (h.encrypted ? "with" : "without") + " encryption, this party " +
                             (encrypted ? "with" : "without") +
                             " encryption (all parties must agree on --insecure)");
  return h;
}

void wait_fd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw std::runtime_error(what + ": timed out");
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r > 0) return;
    if (r < 0 && errno != EINTR) throw std::runtime_error(what + ": " + std::strerror(errno));
  }
}

tcp::endpoint resolve(asio::io_context& io, const PeerAddress& a, std::uint32_t id) {
  tcp::resolver resolver(io);
  asio::error_code ec;
  auto results = resolver.resolve(a.host, std::to_string(a.port), ec);
  if (ec || results.empty())
    throw std::runtime_error("cannot resolve the address of " + party(id) + " (" + where(a) +
                             "): " + (ec ? ec.message() : "no address"));
  return *results.begin();
}

}  // namespace

void write_exactly(int fd, const void* data, std::size_t size, Clock::time_point deadline,
                   const std::string& what) {
  auto p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      wait_fd(fd, POLLOUT, deadline, what);
    } else {
      throw std::runtime_error(what + ": " + std::strerror(errno));
    }
  }
}

void read_exactly(int fd, void* data, std::size_t size, Clock::time_point deadline,
                  const std::string& what) {
  auto p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw std::runtime_error(what + ": connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_fd(fd, POLLIN, deadline, what);
    } else {
      throw std::runtime_error(what + ": " + std::strerror(errno));
    }
  }
}

int listen_on(const std::string& host, std::uint16_t& port) {
  asio::io_context io;
  tcp::endpoint ep = resolve(io, PeerAddress{host, port}, 0);
  tcp::acceptor acceptor(io);
  asio::error_code ec;
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(16, ec);
  if (ec) {
    std::string reason = ec.message();
    if (ec == asio::error::address_in_use)
      reason = "address already in use (another job or program holds the port; pick another)";
    throw std::runtime_error("cannot listen on " + where(PeerAddress{host, port}) + ": " + reason);
  }
  port = acceptor.local_endpoint().port();
  return acceptor.release();
}

std::pair<int, int> socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
    throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
  return {fds[0], fds[1]};
}

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

std::vector<int> connect_mesh(std::uint32_t self, const std::vector<PeerAddress>& parties,
                              const MeshOptions& options) {
  const std::size_t n = parties.size();
  if (self >= n) throw std::runtime_error(party(self) + " is not in a cluster of " + std::to_string(n));
  const auto deadline = Clock::now() + options.timeout;
  asio::io_context io;
  std::vector<int> fds(n, -1);
  auto close_all = [&] {
    for (int& fd : fds) close_fd(fd), fd = -1;
  };
  try {
    // Listen first, so lower parties never wait for us to get there.
    std::uint16_t port = parties[self].port;
    tcp::acceptor acceptor(io);
    if (self + 1 < n) {
      try {
        acceptor.assign(resolve(io, parties[self], self).protocol(), listen_on(parties[self].host, port));
      } catch (const std::exception& e) {
        throw std::runtime_error(party(self) + ": " + e.what());
      }
    }
    auto finish = [&](tcp::socket& s, std::uint32_t peer) {
      s.set_option(tcp::no_delay(true));
      const int fd = s.release();
      if (options.after_hello) {
        fds[peer] = fd;
        options.after_hello(fd, peer);
      }
      fds[peer] = fd;
    };
    // Connect to every lower party, retrying while it is not listening yet.
    for (std::uint32_t j = 0; j < self; ++j) {
      const tcp::endpoint ep = resolve(io, parties[j], j);
      std::string last = "no attempt";
      for (;;) {
        if (Clock::now() >= deadline)
          throw std::runtime_error(party(self) + " could not connect to " + party(j) + " at " +
                                   where(parties[j]) + " within " + seconds(options.timeout) +
                                   " s: " + last + " (is the peer running and reachable?)");
        tcp::socket s(io);
        asio::error_code ec;
        bool done = false;
        s.async_connect(ep, [&](const asio::error_code& e) { ec = e, done = true; });
        io.restart();
        io.run_for(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()) +
                   std::chrono::milliseconds(1));
        if (!done) {
          s.close();
          io.restart();
          io.run();  // collect the aborted handler
          last = "connect timed out";
          continue;
        }
        if (ec) {
          last = ec.message();
          std::this_thread::sleep_for(options.retry_every);  // set-up only, before the event loop
          continue;
        }
        const std::string desc = where(parties[j]);
        const Hello mine{self, j, options.encrypted};
        const auto hb = mine.encode();
        const int fd = s.native_handle();
        write_exactly(fd, hb.data(), hb.size(), deadline, party(self) + ": hello to " + party(j));
        std::array<unsigned char, hello_bytes> theirs{};
        read_exactly(fd, theirs.data(), theirs.size(), deadline,
                     party(self) + ": no hello from " + party(j) + " at " + desc +
                         " (the peer refused this party: wrong party id or security mode?)");
        check_hello(theirs.data(), self, j, options.encrypted, desc);
        finish(s, j);
        break;
      }
    }
    // Accept every higher party; the hello says who it is.
    for (std::size_t accepted = 0; accepted + self + 1 < n; ++accepted) {
      tcp::socket s(io);
      asio::error_code ec;
      bool done = false;
      acceptor.async_accept(s, [&](const asio::error_code& e) { ec = e, done = true; });
      io.restart();
      io.run_for(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()) +
                 std::chrono::milliseconds(1));
      if (!done) {
        std::string missing;
        for (std::uint32_t j = self + 1; j < n; ++j)
          if (fds[j] < 0) missing += (missing.empty() ? "" : ", ") + party(j);
        throw std::runtime_error(party(self) + ": " + missing + " did not connect to " +
                                 where(parties[self]) + " within " +
                                 seconds(options.timeout) + " s");
      }
      if (ec) throw std::runtime_error(party(self) + ": accept failed: " + ec.message());
      asio::error_code rec;
      const auto remote = s.remote_endpoint(rec);
      const std::string desc =
          rec ? std::string("a peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
      const int fd = s.native_handle();
      std::array<unsigned char, hello_bytes> theirs{};
      read_exactly(fd, theirs.data(), theirs.size(), deadline, party(self) + ": hello from " + desc);
      const Hello h = check_hello(theirs.data(), self, std::nullopt, options.encrypted, desc);
      if (h.from <= self || h.from >= n || fds[h.from] >= 0)
        throw std::runtime_error(party(self) + ": " + desc + " says it is " + party(h.from) +
                                 ", which should not connect here (wrong party id; check the "
                                 "cluster config)");
      const Hello mine{self, h.from, options.encrypted};
      const auto hb = mine.encode();
      write_exactly(fd, hb.data(), hb.size(), deadline, party(self) + ": hello to " + party(h.from));
      finish(s, h.from);
    }
  } catch (...) {
    close_all();
    throw;
  }
  return fds;
}

}  // namespace mpcache::sys
