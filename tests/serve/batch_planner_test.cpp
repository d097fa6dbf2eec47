// The batched steps' planning on its own (serve::BatchPlanner): who steps
// when, in which lane, and when a departure may be told, with no MPC.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

using namespace mpcache;
using serve::BatchPlanner;
using serve::BatchStep;
using Sessions = std::vector<std::uint64_t>;

namespace {

// Sessions held by all three servers.
void join_all(BatchPlanner& planner, const Sessions& sessions) {
  for (auto s : sessions)
    for (PartyId server = 0; server < 3; ++server) planner.joined(s, server);
}

// Plans a step of `lane` and finishes it at once; its sessions.
Sessions step(BatchPlanner& planner, std::size_t lane = 0) {
  BatchStep plan = planner.plan(lane);
  planner.finish(lane, plan.sessions);
  return plan.sessions;
}

BatchStep step_of(std::size_t lane, Sessions sessions, std::vector<std::uint64_t> departing = {}) {
  BatchStep s;
  s.lane = lane;
  s.sessions = std::move(sessions);
  for (auto d : departing) s.departures.emplace_back(d, "why");
  return s;
}

}  // namespace

TEST_SUITE("serve batch planner") {
  TEST_CASE("a session is planned only once all three servers hold it") {
    BatchPlanner planner(4, 1);
    CHECK_FALSE(planner.has_work());
    planner.joined(5, 0);
    planner.joined(5, 2);
    CHECK_FALSE(planner.has_work());
    CHECK(step(planner).empty());
    planner.joined(5, 1);
    CHECK(planner.has_work());
    CHECK(step(planner) == Sessions{5});
  }

  TEST_CASE("a speculating session is ready for one step at a time: each step uses up its rows everywhere") {
    BatchPlanner planner(4, 1);
    planner.speculating(7);
    join_all(planner, {7, 8});  // 8 does not speculate
    CHECK(planner.ready(7));
    CHECK(step(planner) == Sessions{7, 8});
    CHECK_FALSE(planner.ready(7));
    CHECK(step(planner) == Sessions{8});  // 7's next rows have not come
    planner.joined(7, 1);
    planner.joined(7, 0);
    CHECK(step(planner) == Sessions{8});  // not yet at server 2
    planner.joined(7, 2);
    CHECK(planner.ready(7));
    CHECK(step(planner) == Sessions{7, 8});
    planner.ended(7);
    CHECK_FALSE(planner.ready(7));
  }

  TEST_CASE("a step holds at most max_batch sessions") {
    BatchPlanner planner(3, 1);
    join_all(planner, {1, 2, 3, 4, 5, 6, 7});
    for (int i = 0; i < 10; ++i) CHECK(step(planner).size() == 3);
  }

  TEST_CASE("fair turns: least recently stepped first") {
    BatchPlanner planner(2, 1);
    join_all(planner, {1, 2, 3});
    // Rows in turn order: whoever waited longest leads; among those that
    // last stepped together, the lower session number.
    CHECK(step(planner) == Sessions{1, 2});
    CHECK(step(planner) == Sessions{3, 1});
    CHECK(step(planner) == Sessions{2, 1});
    CHECK(step(planner) == Sessions{3, 1});
  }

  TEST_CASE("nobody starves: each session steps within ceil(sessions / max_batch) steps") {
    for (std::size_t max_batch = 1; max_batch <= 4; ++max_batch)
      for (std::uint64_t count = 1; count <= 9; ++count) {
        INFO("max_batch " << max_batch << ", " << count << " sessions");
        BatchPlanner planner(max_batch, 1);
        Sessions all;
        for (std::uint64_t s = 1; s <= count; ++s) all.push_back(s);
        join_all(planner, all);
        const long bound = static_cast<long>((count + max_batch - 1) / max_batch);
        std::map<std::uint64_t, long> last_seen;  // step index; -1: before the first
        for (auto s : all) last_seen[s] = -1;
        for (long i = 0; i < 60; ++i) {
          const Sessions sessions = step(planner);
          CHECK(sessions.size() == std::min<std::size_t>(max_batch, count));
          CHECK(std::set<std::uint64_t>(sessions.begin(), sessions.end()).size() == sessions.size());
          for (auto s : sessions) {
            CHECK(i - last_seen[s] <= bound);
            last_seen[s] = i;
          }
        }
        for (auto s : all) CHECK(59 - last_seen[s] < bound);
      }
  }

  TEST_CASE("a newcomer goes first") {
    BatchPlanner planner(2, 1);
    join_all(planner, {1, 2});
    CHECK(step(planner) == Sessions{1, 2});
    CHECK(step(planner) == Sessions{1, 2});
    join_all(planner, {9});
    CHECK(step(planner) == Sessions{9, 1});
    CHECK(step(planner) == Sessions{2, 1});
    CHECK(step(planner) == Sessions{9, 1});
  }

  TEST_CASE("a session in a running step is not planned again until the step finishes") {
    BatchPlanner planner(8, 1);
    join_all(planner, {1, 2});
    BatchStep first = planner.plan(0);
    CHECK(first.sessions == Sessions{1, 2});
    CHECK(planner.stepping(1));
    CHECK(planner.stepping(2));
    CHECK(planner.lane_busy(0));
    CHECK_FALSE(planner.has_work());
    CHECK(planner.plan(0).sessions.empty());
    join_all(planner, {3});  // joins during the step: leads the next one
    planner.finish(0, first.sessions);
    CHECK_FALSE(planner.stepping(1));
    CHECK_FALSE(planner.lane_busy(0));
    CHECK(planner.plan(0).sessions == Sessions{3, 1, 2});
  }

  TEST_CASE("lanes share the sessions evenly") {
    SUBCASE("four sessions, two lanes: two each, none twice") {
      BatchPlanner planner(8, 2);
      join_all(planner, {1, 2, 3, 4});
      BatchStep a = planner.plan(0), b = planner.plan(1);
      CHECK(a.lane == 0);
      CHECK(b.lane == 1);
      CHECK(a.sessions == Sessions{1, 2});
      CHECK(b.sessions == Sessions{3, 4});
      CHECK(planner.lane_busy(0));
      CHECK(planner.lane_busy(1));
      // Lane 0 finishes first and takes its sessions again, not lane 1's.
      planner.finish(0, a.sessions);
      CHECK_FALSE(planner.lane_busy(0));
      CHECK(planner.plan(0).sessions == Sessions{1, 2});
    }
    SUBCASE("an odd count: the share rounds up") {
      BatchPlanner planner(8, 2);
      join_all(planner, {1, 2, 3});
      CHECK(planner.plan(0).sessions == Sessions{1, 2});
      CHECK(planner.plan(1).sessions == Sessions{3});
    }
    SUBCASE("max_batch caps the share") {
      BatchPlanner planner(2, 2);
      join_all(planner, {1, 2, 3, 4, 5, 6});
      CHECK(planner.plan(0).sessions == Sessions{1, 2});
      CHECK(planner.plan(1).sessions == Sessions{3, 4});
    }
    SUBCASE("a lane beyond the planner's is an error") {
      BatchPlanner planner(2, 2);
      CHECK_THROWS_AS(planner.plan(2), Error);
    }
  }

  TEST_CASE("a session that ends between steps is not planned again") {
    BatchPlanner planner(4, 1);
    join_all(planner, {1, 2, 3});
    CHECK(step(planner) == Sessions{1, 2, 3});
    planner.ended(2);
    CHECK(step(planner) == Sessions{1, 3});
    // Ended during its step (a stop token): gone once the step finishes too.
    BatchStep running = planner.plan(0);
    CHECK(running.sessions == Sessions{1, 3});
    planner.ended(3);
    planner.finish(0, running.sessions);
    CHECK(step(planner) == Sessions{1});
    planner.ended(1);
    CHECK_FALSE(planner.has_work());
    CHECK(step(planner).empty());
  }

  TEST_CASE("a departure is told once its session's step has finished") {
    BatchPlanner planner(4, 1);
    join_all(planner, {1, 2});
    BatchStep running = planner.plan(0);
    planner.depart(1, "client 1 went away");
    CHECK(planner.departing(1));
    CHECK_FALSE(planner.has_work());  // 1 steps; 2 too
    CHECK(planner.plan(0).departures.empty());
    planner.finish(0, running.sessions);
    CHECK(planner.has_work());
    BatchStep next = planner.plan(0);
    REQUIRE(next.departures.size() == 1);
    CHECK(next.departures[0].first == 1);
    CHECK(next.departures[0].second == "client 1 went away");
    CHECK(next.sessions == Sessions{2});  // the departed session steps no more
    CHECK_FALSE(planner.departing(1));
    planner.finish(0, next.sessions);
    CHECK(step(planner) == Sessions{2});
  }

  TEST_CASE("departures keep their order, repeats and sessions never joined") {
    BatchPlanner planner(4, 1);
    planner.depart(7, "failed at server 1");  // servers 1 and 2 both failed it before it joined
    planner.depart(3, "client gone");
    planner.depart(7, "failed at server 2");
    CHECK(planner.has_work());
    BatchStep plan = planner.plan(0);
    CHECK(plan.sessions.empty());
    REQUIRE(plan.departures.size() == 3);
    CHECK(plan.departures[0] == std::pair<std::uint64_t, std::string>{7, "failed at server 1"});
    CHECK(plan.departures[1] == std::pair<std::uint64_t, std::string>{3, "client gone"});
    CHECK(plan.departures[2] == std::pair<std::uint64_t, std::string>{7, "failed at server 2"});
    CHECK_FALSE(planner.lane_busy(0));  // nothing steps
    CHECK_FALSE(planner.has_work());
    // Held by only some servers (the leader never joins a session that
    // departed before it joined): never planned.
    join_all(planner, {5});
    planner.joined(7, 0);
    planner.joined(7, 1);
    CHECK(step(planner) == Sessions{5});
  }

  TEST_CASE("servers 1 and 2 start the leader's step once its lane and sessions are free") {
    BatchPlanner planner(4, 1);
    planner.start(0, {1, 2});
    CHECK(planner.lane_busy(0));
    CHECK_FALSE(planner.may_start(step_of(0, {3})));         // its lane runs a step
    CHECK_FALSE(planner.may_start(step_of(1, {2, 3})));      // session 2 is in a step
    CHECK_FALSE(planner.may_start(step_of(1, {}, {1})));     // session 1 departs after its step
    CHECK(planner.may_start(step_of(1, {3}, {4})));          // another lane, other sessions
    CHECK(planner.may_start(step_of(40, {3})));              // a lane not used yet
    planner.start(1, {3});
    planner.finish(0, {1, 2});
    CHECK(planner.may_start(step_of(0, {1, 2})));
    CHECK_FALSE(planner.may_start(step_of(1, {1})));
    planner.finish(1, {3});
    CHECK(planner.may_start(step_of(1, {1, 3}, {2})));
    planner.start(2, {});  // an empty step runs nothing
    CHECK_FALSE(planner.lane_busy(2));
  }

  TEST_CASE("bad arguments") {
    CHECK_THROWS_AS(BatchPlanner(0, 1), Error);
    CHECK_THROWS_AS(BatchPlanner(1, 0), Error);
    BatchPlanner planner(1, 1);
    CHECK_THROWS_AS(planner.joined(1, 3), Error);
  }
}
