// Connection set-up over loopback TCP: hello and party-id checks, pinned-key
// handshake, AEAD records (tampering, replay), clear set-up errors, and the
// link emulator decorator.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"
#include "../support/tcp_parties.hpp"
#include "../../net/sys/aead.hpp"

using namespace mpcache;
using mpcache::testing::contains;
using mpcache::testing::loopback_parties;
using mpcache::testing::run_cluster_parties;

namespace {

std::vector<ConnectOptions> plain(std::size_t n) {
  std::vector<ConnectOptions> o(n);
  for (auto& c : o) c.encrypted = false, c.timeout = std::chrono::milliseconds(5000);
  return o;
}

std::vector<ConnectOptions> keyed(std::size_t n) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (std::size_t i = 0; i < n; ++i) keys.push_back(generate_party_key());
  std::vector<ConnectOptions> o(n);
  for (std::size_t i = 0; i < n; ++i) {
    o[i].timeout = std::chrono::milliseconds(5000);
    o[i].secret_key_pem = keys[i].first;
    for (auto& k : keys) o[i].public_keys_pem.push_back(k.second);
  }
  return o;
}

auto rss3_mul(std::size_t n) {
  return [n](PartyId id, Endpoint& ep, TcpTransport&) -> Task<RingTensor> {
    const RingTensor x = testing::random_ring({n}, 1), y = testing::random_ring({n}, 2);
    auto party = co_await Rss3Party::setup(ep);
    Rss3 p = party->session();
    auto a = co_await p.input(0, id == 0 ? std::optional(x) : std::nullopt, {n});
    auto b = co_await p.input(1, id == 1 ? std::optional(y) : std::nullopt, {n});
    co_return co_await p.reveal(co_await p.mul(a, b));
  };
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("free_tcp_ports: the ports of one call are distinct, even many at once") {
  // Picked one at a time, a closed port can come back at once; a cluster
  // config with a repeated port is then refused (a flaky CI failure once).
  for (int round = 0; round < 20; ++round) {
    auto ports = free_tcp_ports(16);
    REQUIRE(ports.size() == 16);
    std::sort(ports.begin(), ports.end());
    CHECK(std::adjacent_find(ports.begin(), ports.end()) == ports.end());
    CHECK(ports.front() != 0);
  }
}

TEST_CASE("three parties over loopback TCP, plain and encrypted, every backend") {
  const std::size_t n = 4096;
  const RingTensor expect = ring_mul(testing::random_ring({n}, 1), testing::random_ring({n}, 2));
  for (bool encrypted : {false, true})
    for (std::string backend : {"io_uring", "poll", "asio"}) {
      CAPTURE(encrypted);
      CAPTURE(backend);
      auto results = run_cluster_parties<RingTensor>(
          loopback_parties(3), encrypted ? keyed(3) : plain(3), {.backend = backend}, rss3_mul(n));
      for (PartyId id = 0; id < 3; ++id) {
        REQUIRE(results[id].error == "");
        CHECK(*results[id].value == expect);
        CHECK(results[id].transport == std::string("tcp/") +
                                           backend +
                                           (encrypted ? "+aead" : ""));
      }
    }
}

TEST_CASE("a wrong party id is refused at the hello, naming both ids") {
  auto parties = loopback_parties(3);
  // Party 2 has the addresses of parties 0 and 1 swapped.
  auto wrong = parties;
  std::swap(wrong[0], wrong[1]);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < 3; ++id)
    threads.emplace_back([&, id] {
      auto o = plain(1)[0];
      o.timeout = std::chrono::milliseconds(2000);
      errors[id] = error_of([&] {
        auto c = connect_cluster(id, id == 2 ? wrong : parties, o);
        for (int fd : c.fds) if (fd >= 0) ::close(fd);
      });
    });
  for (auto& t : threads) t.join();
  // Party 2 connects to party 1's address believing it is party 0's: party 1
  // refuses the hello, party 2 learns it was refused.
  // Party 1 drops that connection, waits on for a real party 2 and, at the
  // deadline, says what it dropped.
  CHECK(contains(errors[1], "network error: party 1: party 2 did not connect to 127.0.0.1:" +
                                std::to_string(parties[1].port) + " within 2.0 s (dropped 1 other connection"));
  CHECK(contains(errors[1], "party 2 at 127.0.0.1:"));
  CHECK(contains(errors[1], " wants to talk to party 0 (wrong party id; check the cluster config)"));
  CHECK(contains(errors[2], "network error: party 2: no hello from party 0 at 127.0.0.1:" +
                                std::to_string(parties[1].port) +
                                " (the peer refused this party: wrong party id or security mode?)"));
  CHECK(contains(errors[0], "network error: party 0: party 2 did not connect to 127.0.0.1:" +
                                std::to_string(parties[0].port) + " within 2.0 s"));
}

namespace {
sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(0x7F000001);
  return a;
}

// A plain listening socket at 127.0.0.1:port that never accepts (the kernel
// still completes TCP handshakes up to the backlog).
int listen_raw(std::uint16_t port, int backlog) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in a = loopback(port);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, backlog) == 0);
  return fd;
}

// A TCP client of this process, connected to 127.0.0.1:port (retrying while
// nobody listens yet), as a stranger would be.
int connect_stranger(std::uint16_t port) {
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in a = loopback(port);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}
}  // namespace

TEST_CASE("strangers at a listening port (garbage, idle, a false hello) do not stop the set-up") {
  for (const bool encrypted : {false, true}) {
    CAPTURE(encrypted);
    auto parties = loopback_parties(3);
    auto options = encrypted ? keyed(3) : plain(3);
    std::mutex m;
    std::condition_variable seen;
    std::vector<std::string> dropped;
    options[0].on_dropped = [&](const std::string& line) {
      std::lock_guard<std::mutex> lock(m);
      dropped.push_back(line);
      seen.notify_all();
    };
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    auto start = [&](PartyId id) {
      threads.emplace_back([&, id] {
        errors[id] = error_of([&] {
          auto c = connect_cluster(id, parties, options[id]);
          for (int fd : c.fds) if (fd >= 0) ::close(fd);
        });
      });
    };
    start(0);
    // Before parties 1 and 2 exist: one idle connection, one that sends
    // garbage, one that claims to be party 2 and then stalls (encrypted:
    // never answers the key exchange; plain: a wrong security mode).
    const int idle = connect_stranger(parties[0].port);
    const int garbage = connect_stranger(parties[0].port);
    const int liar = connect_stranger(parties[0].port);
    REQUIRE(idle >= 0);
    REQUIRE(garbage >= 0);
    REQUIRE(liar >= 0);
    const std::string junk(16, 'x');
    REQUIRE(::send(garbage, junk.data(), junk.size(), 0) == 16);
    unsigned char hello[16] = {'M', 'P', 'C', 'H', 1, 0, static_cast<unsigned char>(encrypted ? 1 : 0), 0,
                               2, 0, 0, 0, 0, 0, 0, 0};
    if (!encrypted) hello[6] = 1;  // plain party 0 refuses an encrypted hello
    REQUIRE(::send(liar, hello, sizeof hello, 0) == 16);
    {
      std::unique_lock<std::mutex> lock(m);
      REQUIRE(seen.wait_for(lock, std::chrono::seconds(10), [&] { return dropped.size() >= 2; }));
    }
    start(1);
    start(2);
    for (auto& t : threads) t.join();
    for (int fd : {idle, garbage, liar}) ::close(fd);
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
    CHECK(errors[2] == "");
    REQUIRE(dropped.size() == 2);
    const std::string both = dropped[0] + "\n" + dropped[1];
    CHECK(contains(both, "party 0: dropped a connection from 127.0.0.1:"));
    CHECK(contains(both, "is not an mpcache party (bad hello magic)"));
    CHECK(contains(both, encrypted ? "key exchange" : "runs with encryption, this party without"));
  }
}

TEST_CASE("port in use and unreachable peers are clear set-up errors") {
  auto parties = loopback_parties(2);
  // Something else holds party 1's port.
  const int holder = listen_raw(parties[0].port, 1);
  auto o = plain(1)[0];
  o.timeout = std::chrono::milliseconds(300);
  auto e = error_of([&] { (void)connect_cluster(0, parties, o); });
  CHECK(contains(e, "network error: party 0: cannot listen on 127.0.0.1:" + std::to_string(parties[0].port) +
                        ": address already in use"));
  ::close(holder);
  // Nobody listens at party 0's address: party 1 retries, then gives up.
  e = error_of([&] { (void)connect_cluster(1, parties, o); });
  CHECK(contains(e, "network error: party 1 could not connect to party 0 at 127.0.0.1:" +
                        std::to_string(parties[0].port) + " within 0.3"));
  CHECK(contains(e, "Connection refused"));
}

TEST_CASE("a peer that is only late is not said to have refused") {
  auto parties = loopback_parties(2);
  // Something listens at party 0's address but never answers (a busy or
  // late party 0: the kernel completes the TCP handshake on its own).
  const int quiet = listen_raw(parties[0].port, 4);
  auto o = plain(1)[0];
  o.timeout = std::chrono::milliseconds(300);
  const auto e = error_of([&] { (void)connect_cluster(1, parties, o); });
  ::close(quiet);
  CHECK(contains(e, "party 1: no hello from party 0 at 127.0.0.1:" + std::to_string(parties[0].port) +
                        " within 0.3 s (the peer accepted the connection but did not answer"));
  CHECK_FALSE(contains(e, "refused"));
}

TEST_CASE("a peer that holds a different key is refused at the handshake") {
  auto keys = keyed(2);
  keys[0].public_keys_pem[1] = generate_party_key().second;  // party 0 pins another key for 1
  std::vector<std::string> errors(2);
  auto parties = loopback_parties(2);
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < 2; ++id)
    threads.emplace_back([&, id] {
      errors[id] = error_of([&] {
        auto c = connect_cluster(id, parties, keys[id]);
        for (int fd : c.fds) if (fd >= 0) ::close(fd);
      });
    });
  for (auto& t : threads) t.join();
  CHECK(contains(errors[0], "party 0: party 1 failed to prove its identity (its signature does "
                            "not match the pinned public key in the cluster config)"));
  // Mixed security modes are refused at the hello.
  auto mixed = keyed(2);
  mixed[1].encrypted = false;
  parties = loopback_parties(2);
  threads.clear();
  for (PartyId id = 0; id < 2; ++id)
    threads.emplace_back([&, id] {
      errors[id] = error_of([&] {
        auto c = connect_cluster(id, parties, mixed[id]);
        for (int fd : c.fds) if (fd >= 0) ::close(fd);
      });
    });
  for (auto& t : threads) t.join();
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  CHECK(contains(errors[0], "runs without encryption, this party with encryption (all parties must agree on --insecure)"));
}

TEST_CASE("encrypted records: altered, replayed or reordered data is refused") {
  // Party 0 runs the transport; party 1's end is written by hand with the
  // matching key: record 0 is accepted, then a replay of it is refused.
  std::array<std::uint8_t, 32> k01{}, k10{};
  k01[0] = 1;
  k10[0] = 2;
  auto make_record = [&](std::uint64_t counter, bool flip) {
    std::vector<std::byte> r(16 + 16 + 3 + 16);
    const char magic[] = "MPCR";
    for (int i = 0; i < 4; ++i) r[i] = std::byte(magic[i]);
    r[4] = std::byte{1};
    r[8] = std::byte{16 + 3 + 16};
    const auto fh = FrameHeader{7, 3, 0}.encode();
    std::memcpy(r.data() + 16, fh.data(), 16);
    r[32] = std::byte{'a'}, r[33] = std::byte{'b'}, r[34] = std::byte{'c'};
    sys::Aead aead(k10);
    aead.seal(counter, r.data(), 16, r.data() + 16, 19, r.data() + 35);
    if (flip) r[20] ^= std::byte{1};
    return r;
  };
  for (int scenario = 0; scenario < 3; ++scenario) {
    CAPTURE(scenario);
    auto mesh = local_socket_mesh(2);
    mesh[0].keys = {std::nullopt, ChannelKeys{k01, k10}};
    const int raw = mesh[1].fds[0];
    std::vector<std::byte> wire;
    if (scenario == 0) {  // replay of record 0
      auto r = make_record(0, false);
      wire.insert(wire.end(), r.begin(), r.end());
      wire.insert(wire.end(), r.begin(), r.end());
    } else if (scenario == 1) {  // record 1 before record 0
      auto r = make_record(1, false);
      wire.insert(wire.end(), r.begin(), r.end());
    } else {  // altered byte
      auto r = make_record(0, true);
      wire.insert(wire.end(), r.begin(), r.end());
    }
    REQUIRE(::send(raw, wire.data(), wire.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(wire.size()));
    Scheduler s;
    Endpoint e(s, 0, 2);
    TcpTransport t(s, e, std::move(mesh[0]), {});
    CHECK(t.name() == "tcp/io_uring+aead");
    std::string error = error_of([&] {
      (void)sync_wait(s, [](Endpoint& ep) -> Task<int> {
        auto first = co_await ep.recv(1, 7);
        CHECK(first.size() == 3);
        (void)co_await ep.recv(1, 7);
        co_return 0;
      }(e));
    });
    const std::string record = scenario == 0 ? "record 1" : "record 0";
    CHECK(contains(error, "link to party 1 failed: party 1 sent a malformed record (protocol error: " + record +
                              " failed authentication (altered, replayed or reordered data refused))"));
    ::close(raw);
  }
}

TEST_CASE("encrypted records over 1 MiB: sealed and opened piece by piece, a flipped payload bit refused") {
  // Both directions carry big and small frames in one record: the big
  // payloads are sealed in their own vectors and opened in the receiver's.
  auto big = [](std::size_t n, int seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<std::uint8_t>(i * 7 + seed));
    return v;
  };
  auto results = run_cluster_parties<int>(
      loopback_parties(2), keyed(2), {}, [&](PartyId id, Endpoint& ep, TcpTransport&) -> Task<int> {
        const PartyId peer = 1 - id;
        ep.send(peer, 1, big((3u << 20) + 5, static_cast<int>(id)));
        ep.send(peer, 2, big(9, 3));
        ep.send(peer, 1, big(70000, static_cast<int>(id) + 1));
        auto a = co_await ep.recv(peer, 1);
        auto b = co_await ep.recv(peer, 2);
        auto c = co_await ep.recv(peer, 1);
        co_return a == big((3u << 20) + 5, static_cast<int>(peer)) && b == big(9, 3) &&
            c == big(70000, static_cast<int>(peer) + 1);
      });
  for (PartyId id = 0; id < 2; ++id) {
    REQUIRE(results[id].error == "");
    CHECK(*results[id].value == 1);
  }
  // A record of 2 MiB written by hand, one payload bit flipped after sealing:
  // the frames are never delivered.
  std::array<std::uint8_t, 32> k01{}, k10{};
  k01[0] = 1;
  k10[0] = 2;
  const std::size_t payload = 2u << 20;
  std::vector<std::byte> r(16 + 16 + payload + 16);
  const char magic[] = "MPCR";
  for (int i = 0; i < 4; ++i) r[i] = std::byte(magic[i]);
  r[4] = std::byte{1};
  const std::uint64_t body = 16 + payload + 16;
  for (int i = 0; i < 8; ++i) r[8 + i] = std::byte(static_cast<std::uint8_t>(body >> (8 * i)));
  const auto fh = FrameHeader{7, static_cast<std::uint32_t>(payload), 0}.encode();
  std::memcpy(r.data() + 16, fh.data(), 16);
  sys::Aead aead(k10);
  aead.seal(0, r.data(), 16, r.data() + 16, 16 + payload, r.data() + 32 + payload);
  r[32 + payload / 2] ^= std::byte{4};
  auto mesh = local_socket_mesh(2);
  mesh[0].keys = {std::nullopt, ChannelKeys{k01, k10}};
  const int raw = mesh[1].fds[0];
  std::thread writer([&] {
    std::size_t at = 0;
    while (at < r.size()) {
      const ssize_t n = ::send(raw, r.data() + at, r.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<std::size_t>(n);
    }
  });
  Scheduler s;
  Endpoint e(s, 0, 2);
  std::string error;
  {
    TcpTransport t(s, e, std::move(mesh[0]), {});
    error = error_of([&] {
      (void)sync_wait(s, [](Endpoint& ep) -> Task<int> {
        (void)co_await ep.recv(1, 7);
        co_return 0;
      }(e));
    });
  }
  writer.join();
  ::close(raw);
  CHECK(contains(error, "link to party 1 failed: party 1 sent a malformed record (protocol error: record 0 failed "
                        "authentication (altered, replayed or reordered data refused))"));
}

TEST_CASE("link emulation delays each batch by RTT/2 and serializes bytes per direction") {
  Scheduler s;
  TimerLoop timers(s);
  InProcessNetwork net(s, 2);
  LinkEmulator link(net, timers.timers(), link_named("20:1"));  // 20 ms RTT, 1 MB/s
  net.endpoint(0).attach(&link);
  net.endpoint(1).attach(&link);
  CHECK(link.name() == "in-process+emulated-20:1");
  const auto t0 = SteadyClock::now();
  auto ping = [](Endpoint& me, PartyId peer, bool starts) -> Task<void> {
    for (int i = 0; i < 3; ++i) {
      if (starts) {
        me.send(peer, 1, std::vector<std::byte>(10000 - 16));
        (void)co_await me.recv(peer, 1);
      } else {
        (void)co_await me.recv(peer, 1);
        me.send(peer, 1, std::vector<std::byte>(10000 - 16));
      }
    }
  };
  sync_wait(s, when_all(ping(net.endpoint(0), 1, true), ping(net.endpoint(1), 0, false)));
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  // 6 dependent hops of 10 ms + 10 kB / 1 MB/s each: at least 120 ms, and
  // the counters are those of the plain link.
  CHECK(elapsed >= 0.120);
  CHECK(net.endpoint(0).rounds() == 6);
  CHECK(net.endpoint(0).costs().per_peer[1].payload_bytes_sent == 3 * (10000 - 16));
  CHECK(link_named("lan").rtt_s == doctest::Approx(0.3e-3));
  CHECK(link_named("wan").bytes_per_s == doctest::Approx(37.5e6));
  CHECK(contains(error_of([] { (void)link_named("fast"); }), "unknown link 'fast'"));
}
