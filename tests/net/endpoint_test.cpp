#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <thread>
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;

using namespace mpcache;

namespace {
std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}
std::string text_of(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// n ping-pongs on one stream between parties 0 and 1.
Task<void> ping(Endpoint& me, PartyId peer, int n, bool starts) {
  for (int i = 0; i < n; ++i) {
    if (starts) {
      me.send(peer, 1, bytes_of("ping"));
      CHECK(text_of(co_await me.recv(peer, 1)) == "pong");
    } else {
      CHECK(text_of(co_await me.recv(peer, 1)) == "ping");
      me.send(peer, 1, bytes_of("pong"));
    }
  }
}

// One exchange on its own stream: send, then receive the peer's message.
Task<std::string> exchange(Endpoint& me, PartyId peer, StreamId stream) {
  me.send(peer, stream, bytes_of("s" + std::to_string(stream) + "p" + std::to_string(me.id())));
  co_return text_of(co_await me.recv(peer, stream));
}
}  // namespace

TEST_CASE("frame headers round-trip") {
  FrameHeader h{0x0123456789ABCDEFull, 4096, 77};
  auto bytes = h.encode();
  FrameHeader back = FrameHeader::decode(bytes.data());
  CHECK(back.stream == h.stream);
  CHECK(back.length == h.length);
  CHECK(back.clock == h.clock);
  CHECK(bytes[0] == std::byte{0xEF});  // little endian on the wire
}

TEST_CASE("sequential ping-pong counts one round per message hop") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  sync_wait(s, when_all(ping(net.endpoint(0), 1, 3, true), ping(net.endpoint(1), 0, 3, false)));
  // 6 dependent hops: 0->1, 1->0, ... ; party 0 saw the 2nd, 4th, 6th.
  CHECK(net.endpoint(0).rounds() == 6);
  CHECK(net.endpoint(1).rounds() == 5);
  const auto& t = net.endpoint(0).costs().per_peer[1];
  CHECK(t.messages_sent == 3);
  CHECK(t.payload_bytes_sent == 12);
  CHECK(t.frame_bytes_sent == 3 * frame_header_bytes);
  CHECK(t.writes == 3);
}

TEST_CASE("concurrent sub-protocols on their own streams share one write and one round") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  auto party = [&](PartyId id) -> Task<std::vector<std::string>> {
    std::vector<Task<std::string>> subs;
    for (StreamId st = 10; st < 20; ++st) subs.push_back(exchange(net.endpoint(id), 1 - id, st));
    co_return co_await when_all(std::move(subs));
  };
  auto [r0, r1] = sync_wait(s, when_all(party(0), party(1)));
  for (StreamId st = 10; st < 20; ++st) {
    CHECK(r0[st - 10] == "s" + std::to_string(st) + "p1");  // streams never mix
    CHECK(r1[st - 10] == "s" + std::to_string(st) + "p0");
  }
  for (PartyId id : {0u, 1u}) {
    const auto& c = net.endpoint(id).costs();
    CHECK(c.rounds == 1);
    CHECK(c.per_peer[1 - id].writes == 1);
    CHECK(c.per_peer[1 - id].messages_sent == 10);
  }
}

TEST_CASE("messages that arrive before the receiver waits are kept in order") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  auto sender = [&]() -> Task<void> {
    for (int i = 0; i < 5; ++i) net.endpoint(0).send(1, 3, bytes_of(std::to_string(i)));
    co_return;
  };
  auto receiver = [&]() -> Task<std::string> {
    for (int i = 0; i < 3; ++i) co_await s.schedule();  // arrive late
    std::string got;
    for (int i = 0; i < 5; ++i) got += text_of(co_await net.endpoint(1).recv(0, 3));
    co_return got;
  };
  auto [unit, got] = sync_wait(s, when_all(sender(), receiver()));
  (void)unit;
  CHECK(got == "01234");
}

TEST_CASE("wrong party ids are clear errors") {
  Scheduler s;
  InProcessNetwork net(s, 3);
  auto& e = net.endpoint(1);
  try {
    e.send(7, 0, bytes_of("x"));
    FAIL("no error");
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::bad_party);
    CHECK(std::string(err.what()).find("party 7") != std::string::npos);
  }
  CHECK_THROWS_AS(e.send(1, 0, bytes_of("x")), Error);  // to itself
  CHECK_THROWS_AS((void)e.recv(3, 0), Error);
  CHECK_THROWS_AS(net.endpoint(3), Error);
  CHECK_THROWS_AS(Endpoint(s, 2, 2), Error);
}

TEST_CASE("waiting for a message nobody sends is a deadlock naming the stream") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  auto waiter = [&]() -> Task<void> { (void)co_await net.endpoint(0).recv(1, 4242); };
  try {
    sync_wait(s, waiter());
    FAIL("no error");
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::deadlock);
    CHECK(std::string(err.what()).find("party 0 <- party 1 on stream 4242") != std::string::npos);
  }
}

TEST_CASE("two receivers on one stream are refused") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  auto waiter = [&]() -> Task<void> { (void)co_await net.endpoint(0).recv(1, 5); };
  auto sender = [&]() -> Task<void> {
    co_await s.schedule();
    net.endpoint(1).send(0, 5, bytes_of("a"));
  };
  try {
    sync_wait(s, when_all(waiter(), waiter(), sender()));
    FAIL("no error");
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::protocol);
    CHECK(std::string(err.what()).find("fork()") != std::string::npos);
  }
}

namespace {
// The error text a receive ends with ("" if it got a message).
Task<std::string> receive_error(Endpoint& me, PartyId from, StreamId stream) {
  try {
    (void)co_await me.recv(from, stream);
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::cancelled);
    co_return err.what();
  }
  co_return "";
}
}  // namespace

TEST_CASE("cancel: every waiting receive at every party throws Error(cancelled) naming who and why") {
  Scheduler s;
  InProcessNetwork net(s, 3);
  // Parties 1 and 2 wait on each other, not on the cancelling party 0: they
  // must unwind all the same.
  auto canceller = [&]() -> Task<void> {
    co_await s.schedule();
    net.endpoint(0).cancel("enough");
  };
  auto [e0, e1, e2, none] = sync_wait(
      s, when_all(receive_error(net.endpoint(0), 1, 7), receive_error(net.endpoint(1), 2, 7),
                  receive_error(net.endpoint(2), 1, 7), canceller()));
  (void)none;
  CHECK(e0 == "cancelled: party 0: enough");
  CHECK(e1 == "cancelled: party 1: party 0 cancelled: enough");
  CHECK(e2 == "cancelled: party 2: party 0 cancelled: enough");
  CHECK(net.endpoint(2).cancelled());
}

TEST_CASE("cancel: a party that never hears the canceller learns of it from a peer that did") {
  // Over TCP each link is its own connection: party 2 may read party 1's
  // close before party 0's cancellation. Here party 0's message to party 2
  // is lost outright, and party 1 then closes its link to party 2; party 2
  // must still end cancelled, naming party 0, not with a failed link.
  Scheduler s;
  InProcessNetwork net(s, 3);
  net.cut(0, 2);
  auto canceller = [&]() -> Task<void> {
    co_await s.schedule();
    net.endpoint(0).cancel("enough");
    net.cut(1, 2);  // party 1 unwinds and closes at once
  };
  auto [e1, e2, none] =
      sync_wait(s, when_all(receive_error(net.endpoint(1), 0, 7), receive_error(net.endpoint(2), 1, 7), canceller()));
  (void)none;
  CHECK(e1 == "cancelled: party 1: party 0 cancelled: enough");
  CHECK(e2 == "cancelled: party 2: party 0 cancelled: enough");
}

TEST_CASE("cancel: a receive after the cancellation throws even when its message has arrived") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  auto run = [&]() -> Task<std::string> {
    net.endpoint(1).send(0, 3, bytes_of("late"));
    co_await s.schedule();
    co_await s.schedule();  // the message is in party 0's mailbox now
    net.endpoint(0).cancel("stop");
    net.endpoint(0).cancel("a second call changes nothing");
    co_return co_await receive_error(net.endpoint(0), 1, 3);
  };
  CHECK(sync_wait(s, run()) == "cancelled: party 0: stop");
  // After a cancellation nothing more leaves: no abort text follows it.
  net.endpoint(0).abort("ignored");
  CHECK(sync_wait(s, receive_error(net.endpoint(1), 0, 3)) == "cancelled: party 1: party 0 cancelled: stop");
}

TEST_CASE("cancel_when: a stop requested on the token cancels at the end of the tick, from any thread") {
  Scheduler s;
  InProcessNetwork net(s, 2);
  std::stop_source source;
  net.endpoint(1).cancel_when(source.get_token());
  int pings = 0;
  // Party 0 pings forever; party 1 answers until its caller stops it.
  auto pinger = [&]() -> Task<std::string> {
    try {
      for (;;) {
        net.endpoint(0).send(1, 1, bytes_of("ping"));
        (void)co_await net.endpoint(0).recv(1, 1);
      }
    } catch (const Error& err) {
      co_return err.what();
    }
  };
  auto ponger = [&]() -> Task<std::string> {
    try {
      for (;;) {
        (void)co_await net.endpoint(1).recv(0, 1);
        if (++pings == 5) std::thread([&] { source.request_stop(); }).join();
        net.endpoint(1).send(0, 1, bytes_of("pong"));
      }
    } catch (const Error& err) {
      co_return err.what();
    }
  };
  auto [a, b] = sync_wait(s, when_all(pinger(), ponger()));
  CHECK(pings == 5);
  CHECK(a == "cancelled: party 0: party 1 cancelled: stopped by its caller");
  CHECK(b == "cancelled: party 1: stopped by its caller");
}
