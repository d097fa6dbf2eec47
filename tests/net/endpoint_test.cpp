#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
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
