// Connection set-up (see connect.hpp): blocking socket helpers, the
// accepting side that waits for every higher party at once, and the
// connecting side that retries until a lower party listens.
#include "connect.hpp"
#include "hello.hpp"
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <array>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <asio.hpp>

namespace mpcache::sys {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string where(const PeerAddress& a) { return a.host + ":" + std::to_string(a.port); }

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(ms.count()) / 1000.0);
  return buf;
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
    throw std::runtime_error("cannot resolve the address of " + party_name(id) + " (" + where(a) +
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
      throw PeerClosed(what + ": connection closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_fd(fd, POLLIN, deadline, what);
    } else if (errno == ECONNRESET) {
      throw PeerClosed(what + ": connection reset by the peer");
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

std::string remote_of(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  char host[INET6_ADDRSTRLEN] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "a peer";
  unsigned port = 0;
  if (sa.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&sa);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&sa);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

namespace {

// One accepted connection that has not authenticated yet.
struct Pending {
  int fd = -1;
  std::string desc;  // remote address
  std::array<unsigned char, hello_bytes> hello{};
  std::size_t got = 0;
};

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// Reads what has arrived of c's hello. Returns why to drop the connection,
// or nothing (the hello is complete when c.got == hello_bytes).
std::optional<std::string> read_some_hello(Pending& c) {
  const ssize_t got = ::recv(c.fd, c.hello.data() + c.got, hello_bytes - c.got, MSG_DONTWAIT);
  if (got == 0) return "closed the connection before its hello";
  if (got < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return std::string(std::strerror(errno));
    return std::nullopt;
  }
  c.got += static_cast<std::size_t>(got);
  return std::nullopt;
}

// c's hello is complete: check that it names a missing higher party, answer
// it and run the key exchange (after_hello). Returns that party's id;
// throws std::runtime_error (naming the reason) to drop the connection.
std::uint32_t admit(std::uint32_t self, std::size_t n, const MeshOptions& options, Clock::time_point deadline,
                    Pending& c, const std::vector<int>& fds) {
  const Hello h = check_hello(c.hello.data(), self, std::nullopt, options.encrypted, c.desc);
  if (h.from <= self || h.from >= n || fds[h.from] >= 0)
    throw std::runtime_error(party_name(self) + ": " + c.desc + " says it is " + party_name(h.from) +
                             ", which should not connect here (wrong party id; check the cluster config)");
  const auto by = std::min(deadline, Clock::now() + options.authenticate_within);
  set_blocking(c.fd, true);
  const Hello mine{self, h.from, options.encrypted};
  const auto hb = mine.encode();
  write_exactly(c.fd, hb.data(), hb.size(), by, party_name(self) + ": hello to " + party_name(h.from));
  const int one = 1;
  ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (options.after_hello) options.after_hello(c.fd, h.from, by);
  return h.from;
}

// The higher parties that have not connected yet ("" when none).
std::string missing_higher(std::uint32_t self, const std::vector<int>& fds) {
  std::string m;
  for (std::uint32_t j = self + 1; j < fds.size(); ++j)
    if (fds[j] < 0) m += (m.empty() ? "" : ", ") + party_name(j);
  return m;
}

// Waits on the listening socket and on every connection that has not said
// its hello yet, all at once, so a silent or garbage-sending stranger holds
// up nobody. A connection is kept once admit() accepts it; anything else is
// dropped and reported, and waiting goes on until every higher party is in
// or the deadline passes.
void accept_peers(std::uint32_t self, const std::vector<PeerAddress>& parties, const MeshOptions& options,
                  Clock::time_point deadline, int listen_fd, std::vector<int>& fds) {
  std::vector<Pending> pending;
  std::vector<std::string> dropped;
  auto drop = [&](Pending& c, const std::string& why) {
    const std::string line = party_name(self) + ": dropped a connection from " + c.desc + ": " + why;
    if (options.on_dropped) options.on_dropped(line);
    dropped.push_back(c.desc + ": " + why);
    close_fd(c.fd);
    c.fd = -1;
  };
  auto cleanup = [&] {
    for (auto& c : pending) close_fd(c.fd);
    close_fd(listen_fd);
  };
  set_blocking(listen_fd, false);
  try {
    while (!missing_higher(self, fds).empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::string error = party_name(self) + ": " + missing_higher(self, fds) + " did not connect to " +
                            where(parties[self]) + " within " + seconds(options.timeout) + " s";
        if (!dropped.empty())
          error += " (dropped " + std::to_string(dropped.size()) + " other connection" +
                   (dropped.size() > 1 ? "s" : "") + ", the last from " + dropped.back() + ")";
        throw std::runtime_error(error);
      }
      std::vector<pollfd> polled{{listen_fd, POLLIN, 0}};
      for (const auto& c : pending) polled.push_back({c.fd, POLLIN, 0});
      const int r = ::poll(polled.data(), polled.size(), static_cast<int>(std::min<long long>(left, 1000)));
      if (r < 0 && errno != EINTR) throw std::runtime_error(party_name(self) + ": poll: " + std::strerror(errno));
      if (r <= 0) continue;
      // Hellos first (the pending list grows below).
      for (std::size_t i = 0; i < pending.size(); ++i) {
        if (!(polled[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Pending& c = pending[i];
        if (auto why = read_some_hello(c)) {
          drop(c, *why);
        } else if (c.got == hello_bytes) {
          try {
            fds[admit(self, parties.size(), options, deadline, c, fds)] = c.fd;
            c.fd = -1;  // now owned by fds
          } catch (const std::runtime_error& e) {
            drop(c, e.what());
          }
        }
      }
      std::erase_if(pending, [](const Pending& c) { return c.fd < 0; });
      if (!(polled[0].revents & POLLIN)) continue;
      for (int fd; (fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        // (fd < 0, EAGAIN: none left; other errors are retried at the next poll)
        if (pending.size() >= options.max_pending) {
          drop(pending.front(), "too many unauthenticated connections at once");
          pending.erase(pending.begin());
        }
        pending.push_back(Pending{fd, remote_of(fd), {}, 0});
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

// Connects to lower party j, retrying while it is not listening yet, and
// exchanges hellos. Returns the connected socket.
tcp::socket connect_lower(asio::io_context& io, std::uint32_t self, std::uint32_t j,
                          const std::vector<PeerAddress>& parties, const MeshOptions& options,
                          Clock::time_point deadline) {
  const tcp::endpoint ep = resolve(io, parties[j], j);
  std::string last = "no attempt";
  for (;;) {
    if (Clock::now() >= deadline)
      throw std::runtime_error(party_name(self) + " could not connect to " + party_name(j) + " at " + where(parties[j]) +
                               " within " + seconds(options.timeout) + " s: " + last +
                               " (is the peer running and reachable?)");
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
    write_exactly(fd, hb.data(), hb.size(), deadline, party_name(self) + ": hello to " + party_name(j));
    std::array<unsigned char, hello_bytes> theirs{};
    const std::string no_hello = party_name(self) + ": no hello from " + party_name(j) + " at " + desc;
    try {
      read_exactly(fd, theirs.data(), theirs.size(), deadline, no_hello);
    } catch (const PeerClosed&) {
      // It read our hello and hung up: that is a refusal.
      throw std::runtime_error(no_hello + " (the peer refused this party: wrong party id or security mode?)");
    } catch (const std::runtime_error&) {
      throw std::runtime_error(no_hello + " within " + seconds(options.timeout) +
                               " s (the peer accepted the connection but did not answer: late, busy or "
                               "not an mpcache party?)");
    }
    check_hello(theirs.data(), self, j, options.encrypted, desc);
    return s;
  }
}

}  // namespace

std::vector<int> connect_mesh(std::uint32_t self, const std::vector<PeerAddress>& parties,
                              const MeshOptions& options) {
  const std::size_t n = parties.size();
  if (self >= n) throw std::runtime_error(party_name(self) + " is not in a cluster of " + std::to_string(n));
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
        throw std::runtime_error(party_name(self) + ": " + e.what());
      }
    }
    // Connect to every lower party.
    for (std::uint32_t j = 0; j < self; ++j) {
      tcp::socket s = connect_lower(io, self, j, parties, options, deadline);
      s.set_option(tcp::no_delay(true));
      fds[j] = s.release();  // owned (closed on error) from here on
      if (options.after_hello) options.after_hello(fds[j], j, deadline);
    }
    // Accept every higher party; the hello says who it is.
    if (self + 1 < n) accept_peers(self, parties, options, deadline, acceptor.release(), fds);
  } catch (...) {
    close_all();
    throw;
  }
  return fds;
}

}  // namespace mpcache::sys
