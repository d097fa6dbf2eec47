// TCP transport over real sockets (socket pairs and loopback TCP), both
// backends: exact costs, large messages, and every failure mode naming the
// peer (closed, silent, garbage, truncated, wrong id, port in use, refused).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <thread>
#include <sys/socket.h>
#include <unistd.h>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"
#include "../support/tcp_parties.hpp"

using namespace mpcache;
using mpcache::testing::contains;
using mpcache::testing::run_tcp_parties;

namespace {

std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<std::uint8_t>(i * 131 + seed));
  return v;
}

const std::array<std::string, 3> backends{"io_uring", "poll", "asio"};

// Party 0 sends `send_first` bytes to party 1 (if any), then waits for a
// message from party 1 on stream 7; party 1's socket end is driven by hand
// by `peer(fd)`.
std::string error_when_peer_does(const std::string& backend, std::chrono::milliseconds timeout,
                                 const std::function<void(int)>& peer, std::size_t send_first = 0,
                                 std::chrono::microseconds spin = {}) {
  auto mesh = local_socket_mesh(2);
  const int raw = mesh[1].fds[0];
  mesh[1].fds[0] = -1;
  std::thread t([&] { peer(raw); });
  std::string error;
  try {
    Scheduler s;
    Endpoint e(s, 0, 2);
    TcpTransport tcp(s, e, std::move(mesh[0]), {.backend = backend, .silence_timeout = timeout, .spin = spin});
    (void)sync_wait(s, [](Endpoint& ep, std::size_t n) -> Task<std::vector<std::byte>> {
      if (n > 0) ep.send(1, 5, std::vector<std::byte>(n));
      co_return co_await ep.recv(1, 7);
    }(e, send_first));
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::network);
    error = err.what();
  }
  t.join();
  ::close(raw);
  return error;
}

void send_all(int fd, const std::vector<unsigned char>& bytes) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += static_cast<std::size_t>(n);
  }
}

std::vector<unsigned char> record_header(std::uint32_t count, std::uint64_t body) {
  std::vector<unsigned char> h = {'M', 'P', 'C', 'R'};
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<unsigned char>(count >> (8 * i)));
  for (int i = 0; i < 8; ++i) h.push_back(static_cast<unsigned char>(body >> (8 * i)));
  return h;
}

}  // namespace

TEST_CASE("rss3 mul over socket pairs: exact bytes and rounds on every backend, also in the low-latency mode") {
  for (const std::string& backend : backends)
  for (int spin_us : {0, 500}) {
    CAPTURE(backend);
    CAPTURE(spin_us);
    const std::size_t n = 1000;
    const RingTensor x = testing::random_ring({n}, 1), y = testing::random_ring({n}, 2);
    auto results = run_tcp_parties<RingTensor>(
        local_socket_mesh(3), {.backend = backend, .spin = std::chrono::microseconds(spin_us)},
        [&](PartyId id, Endpoint& ep) -> Task<RingTensor> {
          auto party = co_await Rss3Party::setup(ep, {.insecure_seed = 5});
          Rss3 p = party->session();
          auto a = co_await p.input(0, id == 0 ? std::optional(x) : std::nullopt, {n});
          auto b = co_await p.input(1, id == 1 ? std::optional(y) : std::nullopt, {n});
          const CostCounters before = ep.costs();
          auto c = co_await p.mul(a, b);
          const CostCounters used = ep.costs() - before;
          CHECK(used.payload_bytes_sent() == 8 * n);
          CHECK(used.messages_sent() == 1);
          co_return co_await p.reveal(c);
        });
    for (PartyId id = 0; id < 3; ++id) {
      CAPTURE(id);
      REQUIRE(results[id].error == "");
      CHECK(results[id].transport == std::string("tcp/") + backend);
      CHECK(*results[id].value == ring_mul(x, y));
      // 2 inputs (1 round each) + mul + reveal; party 1 owns the second
      // input, so it does not wait a round for it.
      CHECK(results[id].costs.rounds == (id == 1 ? 3u : 4u));
    }
  }
}

TEST_CASE("large messages survive short reads and writes, in order, on every backend") {
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    const std::size_t big = (8u << 20) + 13;
    auto results = run_tcp_parties<int>(
        local_socket_mesh(2), {.backend = backend}, [&](PartyId id, Endpoint& ep) -> Task<int> {
          const PartyId peer = 1 - id;
          // Three frames in one tick (one record), then a reply.
          ep.send(peer, 1, pattern(big, static_cast<std::uint8_t>(id)));
          ep.send(peer, 2, pattern(5, 9));
          ep.send(peer, 1, std::vector<std::byte>{});
          co_await ep.scheduler().schedule();
          auto first = co_await ep.recv(peer, 1);
          auto small = co_await ep.recv(peer, 2);
          auto empty = co_await ep.recv(peer, 1);
          int ok = first == pattern(big, static_cast<std::uint8_t>(peer)) && small == pattern(5, 9) &&
                   empty.empty();
          co_return ok;
        });
    for (PartyId id = 0; id < 2; ++id) {
      REQUIRE(results[id].error == "");
      CHECK(*results[id].value == 1);
      CHECK(results[id].costs.per_peer[1 - id].writes == 1);
      CHECK(results[id].costs.per_peer[1 - id].payload_bytes_received == big + 5);
    }
  }
}

TEST_CASE("a peer that closes mid-protocol is named in the error") {
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    auto error = error_when_peer_does(backend, std::chrono::milliseconds(10000),
                                      [](int fd) { ::shutdown(fd, SHUT_RDWR); });
    CHECK(contains(error, "party 0: link to party 1 failed: party 1 closed the connection"));
  }
}

TEST_CASE("a silent peer fails the waiting party at the deadline, also in the low-latency mode") {
  for (const std::string& backend : backends)
  for (int spin_us : {0, 1000}) {
    CAPTURE(backend);
    CAPTURE(spin_us);
    auto error = error_when_peer_does(backend, std::chrono::milliseconds(300), [&](int fd) {
      char c;
      (void)::read(fd, &c, 1);  // silent until the waiting party gives up and closes
    }, 0, std::chrono::microseconds(spin_us));
    CHECK(contains(error, "link to party 1 failed: party 1 sent nothing for 0.3 s while party 0 "
                          "waited for it (silent peer; deadline exceeded)"));
  }
}

TEST_CASE("a peer that stops reading fails the sender at the deadline, even while it talks") {
  // The peer keeps sending well-formed empty frames (so it is not silent)
  // but never reads: the 64 MiB record fills the socket buffers and the
  // send makes no progress.
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    auto error = error_when_peer_does(
        backend, std::chrono::milliseconds(300),
        [](int fd) {
          auto bytes = record_header(1, 16);
          std::vector<unsigned char> frame(16, 0);
          frame[0] = 99;  // stream 99, length 0: nobody waits for it
          bytes.insert(bytes.end(), frame.begin(), frame.end());
          for (int i = 0; i < 50; ++i) {
            if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) <= 0) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        },
        std::size_t{64} << 20);
    CAPTURE(error);
    CHECK(contains(error, "link to party 1 failed: party 1 accepted no data for 0.3 s (peer stalled or "
                          "not reading; deadline exceeded)"));
  }
}

TEST_CASE("garbage from a peer is refused with a clear error") {
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    auto error = error_when_peer_does(backend, std::chrono::milliseconds(10000), [](int fd) {
      send_all(fd, {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n',
                    '\r', '\n'});
    });
    CHECK(contains(error, "party 1 sent a malformed record (protocol error: bad record magic 0x20544547 "
                          "(not an mpcache peer or a corrupted stream))"));
  }
}

TEST_CASE("a truncated record is refused naming the peer and the byte counts") {
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    auto error = error_when_peer_does(backend, std::chrono::milliseconds(10000), [](int fd) {
      auto bytes = record_header(1, 100);
      bytes.resize(bytes.size() + 10, 0);
      send_all(fd, bytes);
      ::shutdown(fd, SHUT_RDWR);
    });
    CHECK(contains(error, "party 1 closed the connection in the middle of a message (truncated: "
                          "got 26 of 116 bytes)"));
  }
}

TEST_CASE("a record whose frames do not fill it is refused") {
  auto error = error_when_peer_does("io_uring", std::chrono::milliseconds(10000), [](int fd) {
    auto bytes = record_header(2, 20);  // two frames announced, room for one header + 4 bytes
    std::vector<unsigned char> frame(16, 0);
    frame[8] = 4;  // length 4
    bytes.insert(bytes.end(), frame.begin(), frame.end());
    bytes.insert(bytes.end(), {1, 2, 3, 4});
    send_all(fd, bytes);
  });
  CHECK(contains(error, "party 1 sent a malformed record (protocol error: 2 frames do not fill its 20 bytes)"));
}

TEST_CASE("an oversized record length is refused before anything is allocated") {
  auto error = error_when_peer_does("asio", std::chrono::milliseconds(10000), [](int fd) {
    send_all(fd, record_header(1, ~std::uint64_t{0}));
  });
  CHECK(contains(error, "party 1 sent a malformed record (protocol error: a record of 18446744073709551615 "
                        "bytes, over the limit of 8589934592)"));
}

TEST_CASE("forcing io_uring when it is disabled is a clear error; auto falls back to poll") {
  ::setenv("MPCACHE_DISABLE_IO_URING", "1", 1);
  {
    auto mesh = local_socket_mesh(2);
    Scheduler s;
    Endpoint e(s, 0, 2);
    try {
      TcpTransport t(s, e, std::move(mesh[0]), {.backend = "io_uring"});
      FAIL("io_uring was forced and disabled, yet the transport started");
    } catch (const Error& err) {
      CHECK(contains(err.what(), "io_uring transport unavailable: io_uring disabled by MPCACHE_DISABLE_IO_URING"));
    }
    for (int fd : mesh[1].fds) ::close(fd);
  }
  {
    auto mesh = local_socket_mesh(2);
    Scheduler s;
    Endpoint e(s, 0, 2);
    TcpTransport t(s, e, std::move(mesh[0]), {});
    CHECK(t.name() == "tcp/poll");
    CHECK(t.fallback_reason() == "io_uring disabled by MPCACHE_DISABLE_IO_URING");
    for (int fd : mesh[1].fds) ::close(fd);
  }
  ::unsetenv("MPCACHE_DISABLE_IO_URING");
  auto mesh = local_socket_mesh(2);
  Scheduler s;
  Endpoint e(s, 0, 2);
  TcpTransport t(s, e, std::move(mesh[0]), {});
  CHECK(t.name() == "tcp/io_uring");
  for (int fd : mesh[1].fds) ::close(fd);
}

TEST_CASE("records over 1 MiB arrive frame by frame: big and small frames mixed, in order, every tick") {
  // Payloads from 64 KiB on are sent from their own vectors and received
  // straight into the receiver's; records from 1 MiB on are parsed frame by
  // frame. Sizes straddle both thresholds and the 256 KiB receive chunk.
  const std::vector<std::size_t> sizes = {(1u << 20) + 7, 3, 65535, 65536, 0, (2u << 20) + 1, 262143, 17};
  for (const std::string& backend : backends)
    for (int spin_us : {0, 200}) {
      CAPTURE(backend);
      CAPTURE(spin_us);
      auto results = run_tcp_parties<int>(
          local_socket_mesh(2), {.backend = backend, .spin = std::chrono::microseconds(spin_us)},
          [&](PartyId id, Endpoint& ep) -> Task<int> {
            const PartyId peer = 1 - id;
            int ok = 1;
            for (int tick = 0; tick < 3; ++tick) {
              for (std::size_t k = 0; k < sizes.size(); ++k)
                ep.send(peer, k % 3, pattern(sizes[k], static_cast<std::uint8_t>(id * 16 + tick * 4 + k)));
              for (std::size_t k = 0; k < sizes.size(); ++k) {
                auto got = co_await ep.recv(peer, k % 3);
                ok &= got == pattern(sizes[k], static_cast<std::uint8_t>(peer * 16 + tick * 4 + k));
              }
            }
            co_return ok;
          });
      for (PartyId id = 0; id < 2; ++id) {
        REQUIRE(results[id].error == "");
        CHECK(*results[id].value == 1);
        CHECK(results[id].costs.per_peer[1 - id].writes == 3);
      }
    }
}

TEST_CASE("a transport built on one thread can be driven from another") {
  // io_uring rings are single-issuer: the thread that first drives the
  // transport owns it, not the one that constructed it.
  auto mesh = local_socket_mesh(2);
  std::vector<std::unique_ptr<Scheduler>> s;
  std::vector<std::unique_ptr<Endpoint>> e;
  std::vector<std::unique_ptr<TcpTransport>> t;
  for (PartyId id = 0; id < 2; ++id) {
    s.push_back(std::make_unique<Scheduler>());
    e.push_back(std::make_unique<Endpoint>(*s[id], id, 2));
    t.push_back(std::make_unique<TcpTransport>(*s[id], *e[id], std::move(mesh[id]), TcpOptions{.backend = "io_uring"}));
  }
  std::vector<std::string> got(2);
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < 2; ++id)
    threads.emplace_back([&, id] {
      got[id] = sync_wait(*s[id], [](Endpoint& ep, PartyId me) -> Task<std::string> {
        ep.send(1 - me, 1, pattern(3, static_cast<std::uint8_t>(me)));
        auto m = co_await ep.recv(1 - me, 1);
        co_return m == pattern(3, static_cast<std::uint8_t>(1 - me)) ? "ok" : "wrong bytes";
      }(*e[id], id));
      t[id]->shutdown();
    });
  for (auto& th : threads) th.join();
  CHECK(got[0] == "ok");
  CHECK(got[1] == "ok");
}

TEST_CASE("a big record cut short, overrun by a frame, or not filled is refused with its sizes") {
  // Records of 1 MiB and more are parsed frame by frame while they arrive,
  // by the same RecordReader as small records, with the same messages.
  const std::uint64_t body = 4u << 20;
  auto frame_header = [](std::uint32_t length) {
    std::vector<unsigned char> f(16, 0);
    f[0] = 7;  // stream 7, the one the test party waits on
    for (int i = 0; i < 4; ++i) f[8 + i] = static_cast<unsigned char>(length >> (8 * i));
    return f;
  };
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    auto truncated = error_when_peer_does(backend, std::chrono::milliseconds(10000), [&](int fd) {
      auto bytes = record_header(1, body);
      auto f = frame_header(static_cast<std::uint32_t>(body - 16));
      bytes.insert(bytes.end(), f.begin(), f.end());
      bytes.resize(bytes.size() + (1u << 20), 5);
      send_all(fd, bytes);
      ::shutdown(fd, SHUT_RDWR);
    });
    CHECK(contains(truncated, "party 1 closed the connection in the middle of a message (truncated: got " +
                                  std::to_string(16 + 16 + (1u << 20)) + " of " + std::to_string(16 + body) +
                                  " bytes)"));
    auto overrun = error_when_peer_does(backend, std::chrono::milliseconds(10000), [&](int fd) {
      auto bytes = record_header(1, body);
      auto f = frame_header(static_cast<std::uint32_t>(body));  // 16 bytes too long
      bytes.insert(bytes.end(), f.begin(), f.end());
      bytes.resize(bytes.size() + (1u << 20), 5);
      send_all(fd, bytes);
    });
    CHECK(contains(overrun, "party 1 sent a malformed record (protocol error: a frame of " +
                                std::to_string(body) + " bytes overruns its " + std::to_string(body) + " bytes)"));
    auto unfilled = error_when_peer_does(backend, std::chrono::milliseconds(10000), [&](int fd) {
      auto bytes = record_header(1, body);
      auto f = frame_header(1u << 20);
      bytes.insert(bytes.end(), f.begin(), f.end());
      bytes.resize(bytes.size() + (1u << 20) + 64, 5);
      send_all(fd, bytes);
    });
    CHECK(contains(unfilled, "party 1 sent a malformed record (protocol error: 1 frames do not fill its " +
                                 std::to_string(body) + " bytes)"));
  }
}

TEST_CASE("transport drivers by name: canonical names, aliases, and unknown names listed") {
  CHECK(parse_backend("uring") == "io_uring");
  CHECK(parse_backend("io_uring") == "io_uring");
  CHECK(parse_backend("asio") == "asio");
  CHECK(parse_backend("poll") == "poll");
  CHECK(parse_backend("auto") == "auto");
  CHECK(tcp_backend_names() == std::vector<std::string>{"auto", "io_uring", "poll", "asio"});
  try {
    (void)parse_backend("epoll");
    FAIL("an unknown driver was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("unknown transport backend 'epoll' (auto, io_uring, poll, asio)") != std::string::npos);
  }
}
