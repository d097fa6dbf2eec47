// The drivers of io_driver.hpp on their own (io_uring, poll_driver.cpp's
// plain syscalls), over a Unix socket pair: sends the socket takes leave at
// once, receives wait for data, a send the socket cannot take waits for
// room (io_uring: in the ring, with the receives) while receives complete,
// cancellation and a closed peer complete what is pending, and sends never
// keep the receives waiting for two calls in a row. (asio is covered through
// the transport, tcp_test.cpp.)
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cerrno>
#include <thread>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <doctest/doctest.h>
#include "../../net/sys/io_driver.hpp"

using mpcache::sys::Completion;
using mpcache::sys::ConstBuffer;
using mpcache::sys::IoDriver;

namespace {

struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0);
    for (int f : fd) ::fcntl(f, F_SETFL, ::fcntl(f, F_GETFL) | O_NONBLOCK);
  }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<std::uint8_t>(i * 7 + seed));
  return v;
}

// Reads exactly n bytes from a blocking view of fd.
std::vector<std::byte> read_exactly(int fd, std::size_t n) {
  std::vector<std::byte> got(n);
  std::size_t at = 0;
  while (at < n) {
    const ssize_t r = ::recv(fd, got.data() + at, n - at, 0);
    if (r > 0) {
      at += static_cast<std::size_t>(r);
    } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } else {
      break;
    }
  }
  got.resize(at);
  return got;
}

// Runs `test` on every driver these tests hold to, each over a fresh socket pair.
void for_each_driver(const std::function<void(IoDriver& d, SocketPair& s)>& test) {
  const std::vector<std::pair<std::string, std::unique_ptr<IoDriver> (*)()>> drivers = {
      {"io_uring", [] { return mpcache::sys::make_uring_driver(); }},
      {"poll", mpcache::sys::make_poll_driver},
  };
  for (const auto& [name, make] : drivers) {
    CAPTURE(name);
    SocketPair s;
    auto d = make();
    test(*d, s);
  }
}

}  // namespace

TEST_CASE("drivers: a send the socket takes leaves at once; a receive waits for data") {
  for_each_driver([](IoDriver& d, SocketPair& s) {
    const auto out_bytes = pattern(100, 1);
    const ConstBuffer piece{out_bytes.data(), out_bytes.size()};
    d.send(s.fd[0], std::span(&piece, 1), 2);
    // Already on the socket, before any wait: no ring round in between.
    std::array<std::byte, 128> peer{};
    REQUIRE(::recv(s.fd[1], peer.data(), peer.size(), MSG_DONTWAIT) == 100);
    CHECK(std::equal(out_bytes.begin(), out_bytes.end(), peer.begin()));
    std::vector<Completion> done;
    d.wait(std::chrono::nanoseconds{0}, done);
    REQUIRE(done.size() == 1);
    CHECK(done[0].tag == 2);
    CHECK(done[0].result == 100);

    // A receive with nothing to read: a look finds nothing, a bounded wait
    // returns empty, then data from another thread completes it.
    std::array<std::byte, 64> in{};
    d.recv(s.fd[0], in.data(), in.size(), 3);
    done.clear();
    d.wait(std::chrono::nanoseconds{0}, done);
    CHECK(done.empty());
    d.wait(std::chrono::milliseconds(5), done);
    CHECK(done.empty());
    const auto reply = pattern(10, 2);
    std::thread peer_thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      CHECK(::send(s.fd[1], reply.data(), reply.size(), 0) == 10);
    });
    while (done.empty()) d.wait(std::chrono::seconds(10), done);
    peer_thread.join();
    REQUIRE(done.size() == 1);
    CHECK(done[0].tag == 3);
    CHECK(done[0].result == 10);
    CHECK(std::equal(reply.begin(), reply.end(), in.begin()));
  });
}

TEST_CASE("drivers: a send the socket cannot take waits for room, and receives complete meanwhile") {
  for_each_driver([](IoDriver& d, SocketPair& s) {
    const std::size_t big = std::size_t{8} << 20;  // far more than the socket buffer
    const auto payload = pattern(big, 3);
    const auto reply = pattern(4, 4);
    // The peer drains everything, then answers.
    std::vector<std::byte> peer_got;
    std::thread peer_thread([&] {
      peer_got = read_exactly(s.fd[1], big);
      CHECK(::send(s.fd[1], reply.data(), reply.size(), 0) == 4);
    });
    std::array<std::byte, 16> in{};
    d.recv(s.fd[0], in.data(), in.size(), 3);
    // As the transport does: one send in flight, resumed after each partial one.
    std::size_t sent = 0;
    bool send_inflight = false, received = false;
    int partial_sends = 0;
    for (int waits = 0; (sent < big || !received) && waits < 100000; ++waits) {
      if (!send_inflight && sent < big) {
        const ConstBuffer rest{payload.data() + sent, big - sent};
        d.send(s.fd[0], std::span(&rest, 1), 2);
        send_inflight = true;
      }
      std::vector<Completion> done;
      d.wait(std::chrono::seconds(10), done);
      for (const auto& c : done) {
        if (c.tag == 2) {
          REQUIRE(c.result > 0);
          sent += static_cast<std::size_t>(c.result);
          send_inflight = false;
          ++partial_sends;
        } else {
          REQUIRE(c.tag == 3);
          CHECK(c.result == 4);
          received = true;
        }
      }
    }
    peer_thread.join();
    CHECK(sent == big);
    CHECK(received);
    CHECK(partial_sends > 1);  // the socket could not take it in one go
    CHECK(peer_got == payload);
    CHECK(std::equal(reply.begin(), reply.end(), in.begin()));
  });
}

TEST_CASE("drivers: cancel completes a waiting receive; a closed peer completes one with 0") {
  for_each_driver([](IoDriver& d, SocketPair& s) {
    std::array<std::byte, 16> in{};
    d.recv(s.fd[0], in.data(), in.size(), 5);
    d.cancel(s.fd[0]);
    std::vector<Completion> done;
    d.wait(std::chrono::milliseconds(100), done);
    REQUIRE(done.size() == 1);
    CHECK(done[0].tag == 5);
    CHECK(done[0].result == -ECANCELED);

    d.recv(s.fd[0], in.data(), in.size(), 7);
    ::close(s.fd[1]);
    s.fd[1] = -1;
    done.clear();
    while (done.empty()) d.wait(std::chrono::seconds(10), done);
    REQUIRE(done.size() == 1);
    CHECK(done[0].tag == 7);
    CHECK(done[0].result == 0);
  });
}

TEST_CASE("drivers: a party that keeps sending still hears its peer") {
  for_each_driver([](IoDriver& d, SocketPair& s) {
    const auto reply = pattern(6, 5);
    REQUIRE(::send(s.fd[1], reply.data(), reply.size(), 0) == 6);  // waiting before we look
    std::array<std::byte, 16> in{};
    d.recv(s.fd[0], in.data(), in.size(), 3);
    const auto out_bytes = pattern(8, 6);
    const ConstBuffer piece{out_bytes.data(), out_bytes.size()};
    std::vector<std::uint64_t> first, second;
    std::vector<Completion> done;
    // Right after a send the driver reports the send and looks at receives
    // the next time, but not twice in a row: the second send's wait brings
    // the receive along.
    d.send(s.fd[0], std::span(&piece, 1), 2);
    d.wait(std::chrono::nanoseconds{0}, done);
    for (const auto& c : done) first.push_back(c.tag);
    done.clear();
    d.send(s.fd[0], std::span(&piece, 1), 2);
    d.wait(std::chrono::nanoseconds{0}, done);
    for (const auto& c : done) second.push_back(c.tag);
    CHECK(first == std::vector<std::uint64_t>{2});
    std::sort(second.begin(), second.end());
    CHECK(second == std::vector<std::uint64_t>{2, 3});
    CHECK(std::equal(reply.begin(), reply.end(), in.begin()));
  });
}
