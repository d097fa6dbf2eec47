#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;

using namespace mpcache;

TEST_CASE("cost snapshots subtract per peer and sum across peers") {
  CostCounters early, late;
  early.per_peer.resize(3);
  late.per_peer.resize(3);
  early.per_peer[1].payload_bytes_sent = 10;
  late.per_peer[1].payload_bytes_sent = 50;
  late.per_peer[2].payload_bytes_sent = 7;
  late.per_peer[2].messages_sent = 2;
  late.per_peer[2].frame_bytes_sent = 32;
  late.per_peer[2].writes = 1;
  early.rounds = 2;
  late.rounds = 5;
  CostCounters d = late - early;
  CHECK(d.per_peer[1].payload_bytes_sent == 40);
  CHECK(d.payload_bytes_sent() == 47);
  CHECK(d.messages_sent() == 2);
  CHECK(d.frame_bytes_sent() == 32);
  CHECK(d.writes() == 1);
  CHECK(d.rounds == 3);
}
