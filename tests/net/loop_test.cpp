// One event loop serving several TCP transports and a LoopInbox, as a server
// party's loop serves its mesh and its clients: a message, a deadline, a
// send that waits for room, or a post from another thread on any one source
// wakes the loop while the others stay idle. The idle transports' deadlines
// are an hour away, so a loop that slept in one of them would hang: the
// guard is the test's ctest TIMEOUT, not a timing threshold.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <thread>
#include <sys/socket.h>
#include <unistd.h>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
#include "../support/tcp_parties.hpp"

using namespace mpcache;
using mpcache::testing::contains;

namespace {

const std::array<std::string, 3> backends{"io_uring", "poll", "asio"};
constexpr std::chrono::hours idle_timeout{1};
// Long enough that the loop is most likely asleep when the other thread acts
// (a test passes either way; it then just exercises less).
constexpr std::chrono::milliseconds let_it_sleep{100};

std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<std::uint8_t>(i * 131 + seed));
  return v;
}

// Party 0's side of two 2-party links, A and B, on one Scheduler; the peers'
// socket ends stay in `peer_a` and `peer_b` for the test to drive.
struct Hub {
  Scheduler scheduler;
  Endpoint a{scheduler, 0, 2};
  Endpoint b{scheduler, 0, 2};
  Connections peer_a, peer_b;
  std::unique_ptr<TcpTransport> tcp_a, tcp_b;

  Hub(const std::string& backend, std::chrono::milliseconds b_timeout, std::chrono::microseconds spin) {
    auto mesh_a = local_socket_mesh(2);
    auto mesh_b = local_socket_mesh(2);
    peer_a = std::move(mesh_a[1]);
    peer_b = std::move(mesh_b[1]);
    // A first: the scheduler used to block in the first source with work.
    tcp_a = std::make_unique<TcpTransport>(scheduler, a, std::move(mesh_a[0]),
                                           TcpOptions{.backend = backend, .silence_timeout = idle_timeout, .spin = spin});
    tcp_b = std::make_unique<TcpTransport>(scheduler, b, std::move(mesh_b[0]),
                                           TcpOptions{.backend = backend, .silence_timeout = b_timeout, .spin = spin});
  }
  ~Hub() {
    for (const Connections* c : {&peer_a, &peer_b})
      for (int fd : c->fds)
        if (fd >= 0) ::close(fd);
  }
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;
};

// Party 1 of one link on its own thread and loop, running fn(Endpoint&).
template <class R, class Fn>
std::thread peer_thread(Connections connections, const std::string& backend, std::optional<R>& out, Fn fn) {
  return std::thread([connections = std::move(connections), backend, &out, fn]() mutable {
    Scheduler s;
    Endpoint e(s, 1, 2);
    TcpTransport t(s, e, std::move(connections), {.backend = backend, .silence_timeout = std::chrono::seconds(60)});
    out = sync_wait(s, fn(e));
  });
}

}  // namespace

TEST_CASE("a message on the second transport wakes the loop while the first is idle, on every backend") {
  for (const std::string& backend : backends)
  for (int spin_us : {0, 50}) {
    CAPTURE(backend);
    CAPTURE(spin_us);
    Hub hub(backend, idle_timeout, std::chrono::microseconds(spin_us));
    std::optional<bool> acked;
    auto peer = peer_thread<bool>(std::move(hub.peer_b), backend, acked, [](Endpoint& e) -> Task<bool> {
      std::this_thread::sleep_for(let_it_sleep);
      e.send(0, 7, pattern(100, 1));
      const auto ack = co_await e.recv(0, 8);
      co_return ack == pattern(3, 2);
    });
    const auto got = sync_wait(hub.scheduler, [](Endpoint& b) -> Task<std::vector<std::byte>> {
      auto m = co_await b.recv(1, 7);
      b.send(1, 8, pattern(3, 2));
      co_return m;
    }(hub.b));
    peer.join();
    CHECK(got == pattern(100, 1));
    CHECK(acked == std::optional<bool>(true));
    CHECK(hub.b.rounds() == 1);
    CHECK(hub.a.rounds() == 0);
  }
}

TEST_CASE("a silent peer on the second transport fails at its deadline while the first is idle") {
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    Hub hub(backend, std::chrono::milliseconds(300), std::chrono::microseconds(0));
    const int raw = hub.peer_b.fds[0];
    hub.peer_b.fds[0] = -1;
    std::string error;
    try {
      (void)sync_wait(hub.scheduler, [](Endpoint& b) -> Task<std::vector<std::byte>> {
        co_return co_await b.recv(1, 7);
      }(hub.b));
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::network);
      error = e.what();
    }
    CAPTURE(error);
    CHECK(contains(error, "link to party 1 failed: party 1 sent nothing for 0.3 s while party 0 waited for it "
                          "(silent peer; deadline exceeded)"));
    ::close(raw);
  }
}

TEST_CASE("a send that waits for room on the second transport goes on while the first is idle") {
  // 64 MiB fill the socket buffers: the rest waits in the kernel (the
  // io_uring ring, a POLLOUT, asio's reactor) until the peer reads.
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    Hub hub(backend, idle_timeout, std::chrono::microseconds(0));
    const std::size_t size = std::size_t{64} << 20;
    std::optional<bool> intact;
    auto peer = peer_thread<bool>(std::move(hub.peer_b), backend, intact, [&](Endpoint& e) -> Task<bool> {
      std::this_thread::sleep_for(let_it_sleep);
      const auto m = co_await e.recv(0, 7);
      e.send(0, 8, pattern(3, 2));
      co_return m == pattern(size, 5);
    });
    const auto ack = sync_wait(hub.scheduler, [](Endpoint& b, std::size_t n) -> Task<std::vector<std::byte>> {
      b.send(1, 7, pattern(n, 5));
      co_return co_await b.recv(1, 8);
    }(hub.b, size));
    peer.join();
    CHECK(intact == std::optional<bool>(true));
    CHECK(ack == pattern(3, 2));
  }
}

TEST_CASE("a post from another thread wakes a loop asleep in its transports' wait, and runs on the loop's thread") {
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    Hub hub(backend, idle_timeout, std::chrono::microseconds(0));
    LoopInbox inbox(hub.scheduler);
    inbox.keep_alive(true);
    bool ran = false;
    std::thread::id ran_on;
    std::thread poster([&] {
      std::this_thread::sleep_for(let_it_sleep);
      inbox.post([&] {
        ran = true;
        ran_on = std::this_thread::get_id();
      });
    });
    hub.scheduler.run_until([&] { return ran; });
    poster.join();
    CHECK(ran);
    CHECK(ran_on == std::this_thread::get_id());
  }
}

TEST_CASE("a loop with only its inbox sleeps there: posts run in order, a stop and keep_alive(false) wake it") {
  Scheduler s;
  LoopInbox inbox(s);
  SUBCASE("posts from another thread run in posting order") {
    inbox.keep_alive(true);
    std::vector<int> seen;
    std::thread poster([&] {
      std::this_thread::sleep_for(let_it_sleep);
      for (int i = 0; i < 1000; ++i) inbox.post([&seen, i] { seen.push_back(i); });
    });
    s.run_until([&] { return seen.size() == 1000; });
    poster.join();
    std::vector<int> expected(1000);
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(seen == expected);
  }
  SUBCASE("a stop requested on the token it was given wakes it") {
    inbox.keep_alive(true);
    std::stop_source stop;
    inbox.wake_on_stop(stop.get_token());
    std::thread stopper([&] {
      std::this_thread::sleep_for(let_it_sleep);
      stop.request_stop();
    });
    s.run_until([&] { return stop.stop_requested(); });
    stopper.join();
    CHECK(stop.stop_requested());
  }
  SUBCASE("keep_alive(false) from another thread wakes it, and with nothing left it reports a deadlock") {
    inbox.keep_alive(true);
    std::thread stopper([&] {
      std::this_thread::sleep_for(let_it_sleep);
      inbox.keep_alive(false);
    });
    std::optional<ErrorCode> code;
    try {
      s.run_until([] { return false; });
    } catch (const Error& e) {
      code = e.code();
    }
    stopper.join();
    CHECK(code == std::optional<ErrorCode>(ErrorCode::deadlock));
  }
  SUBCASE("a callback that throws leaves the loop; the ones after it run next time") {
    std::vector<int> seen;
    inbox.post([&] { seen.push_back(1); });
    inbox.post([] { throw Error(ErrorCode::invalid_argument, "bad request"); });
    inbox.post([&] { seen.push_back(3); });
    CHECK_THROWS_WITH_AS(s.run_until([&] { return seen.size() == 2; }), doctest::Contains("bad request"), Error);
    CHECK(seen == std::vector<int>{1});
    s.run_until([&] { return seen.size() == 2; });
    CHECK(seen == std::vector<int>{1, 3});
  }
}
