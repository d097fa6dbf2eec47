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

TEST_CASE("merging parties' costs: slowest window, busiest bytes, critical path, the dealer offline") {
  std::vector<PartyCost> parties(3);
  parties[0] = {.start_s = 1.0, .end_s = 2.5, .bytes_sent = 100, .clock_before = 10, .clock_after = 14};
  parties[1] = {.start_s = 1.2, .end_s = 2.0, .bytes_sent = 300, .clock_before = 12, .clock_after = 15};
  parties[2] = {.start_s = 0.0, .end_s = 9.0, .bytes_sent = 50, .clock_before = 0, .clock_after = 99, .offline = true};
  parties[0].by_tag[1] = {.rounds = 2, .payload_bytes_sent = 60, .seconds = 0.5};
  parties[1].by_tag[1] = {.rounds = 4, .payload_bytes_sent = 40, .seconds = 0.1};
  const MergedCost m = merge_party_costs(parties);
  CHECK(m.latency_s == doctest::Approx(1.5));  // the dealer's window does not count
  CHECK(m.rounds == 3);                        // highest clocks: 15 - 12
  CHECK(m.bytes_max_party == 300);
  CHECK(m.bytes_total == 400);
  CHECK(m.offline_bytes == 50);
  CHECK(m.by_tag[1].payload_bytes_sent == 60);
  CHECK(m.by_tag[1].rounds == 4);  // of two views, the higher
  CHECK(m.by_tag[1].seconds == doctest::Approx(0.5));

  parties[2].offline = false;  // three online: the median view
  parties[2].by_tag[1] = {.rounds = 3, .payload_bytes_sent = 0, .seconds = 0.2};
  const MergedCost all = merge_party_costs(parties);
  CHECK(all.latency_s == doctest::Approx(9.0));
  CHECK(all.rounds == 99 - 12);
  CHECK(all.offline_bytes == 0);
  CHECK(all.by_tag[1].rounds == 3);
  CHECK(all.by_tag[1].seconds == doctest::Approx(0.2));

  CostCounters before, after;
  before.per_peer.resize(2);
  after.per_peer.resize(2);
  after.per_peer[1].payload_bytes_sent = 8;
  before.rounds = 3;
  after.rounds = 5;
  const PartyCost c = party_cost_between(before, after);
  CHECK(c.bytes_sent == 8);
  CHECK(c.clock_before == 3);
  CHECK(c.clock_after == 5);
}
