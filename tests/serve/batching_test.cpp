// Continuous batching in the service: sessions in their decode phase step
// together (Decoder::decode_batch), join and leave between steps, and each
// still gets exactly the tokens generate gives its prompt.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"
#include "service_harness.hpp"

using namespace mpcache;
using namespace mpcache::serve_test;

namespace {

struct Asked {
  std::string prompt;
  std::size_t tokens;
};

// Server 0's chosen tokens: per step, the sessions whose token it chose
// then. A batched step reports all its sessions at one round clock.
struct StepLog {
  std::map<std::uint64_t, std::set<std::uint64_t>> sessions_at_clock;
  void add(std::uint64_t session, std::size_t step, std::uint64_t rounds) {
    if (step > 0) sessions_at_clock[rounds].insert(session);  // step 0: the prefill's token, the session's own
  }
  std::size_t widest() const {
    std::size_t most = 0;
    for (const auto& [clock, sessions] : sessions_at_clock) most = std::max(most, sessions.size());
    return most;
  }
  std::uint64_t last_clock() const { return sessions_at_clock.empty() ? 0 : sessions_at_clock.rbegin()->first; }
  bool together(std::uint64_t a, std::uint64_t b) const {
    return std::any_of(sessions_at_clock.begin(), sessions_at_clock.end(),
                       [&](const auto& entry) { return entry.second.contains(a) && entry.second.contains(b); });
  }
};

void check_tokens(const std::vector<Asked>& asked, const std::vector<Outcome>& outcomes) {
  for (std::size_t c = 0; c < asked.size(); ++c) {
    INFO("client " << c << ": " << outcomes[c].error);
    CHECK(outcomes[c].error.empty());
    CHECK(outcomes[c].tokens == generated(bytes_of(asked[c].prompt), asked[c].tokens));
  }
}

// All `asked` at once, each client its own; server 0's steps logged.
struct Served {
  std::vector<Outcome> outcomes;
  std::array<serve::ServeStats, 3> stats;
  StepLog steps;
};

Served serve_all(serve::ServeOptions options, const std::vector<Asked>& asked) {
  Served out;
  options.on_step = [&](const serve::StepReport& r) {
    if (r.server == 0) out.steps.add(r.session, r.step, r.rounds);
  };
  Service service(options);
  out.outcomes.resize(asked.size());
  std::vector<Task<void>> clients;
  for (std::size_t c = 0; c < asked.size(); ++c)
    clients.push_back(ask(service.connect("client " + std::to_string(c)),
                          request_for(asked[c].prompt, asked[c].tokens), out.outcomes[c]));
  service.run(std::move(clients));
  out.stats = service.stats;
  return out;
}

// One session alone (the emma prompt, `tokens` tokens): server 0's online
// clock and bytes when each token was chosen, and every server's stats.
struct Alone {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> at;  // server 0's (rounds, bytes)
  std::array<std::vector<std::uint64_t>, 3> bytes;          // each server's
  std::array<std::vector<std::uint64_t>, 3> dealt_inline;   // each server's
  std::vector<serve::OfflineCosts> offline;                 // server 0's refills so far, at each token
  std::vector<std::uint32_t> tokens;
  std::array<serve::ServeStats, 3> stats;
  // The three servers' online bytes in the step that chose token `step`.
  std::uint64_t step_bytes(std::size_t step) const {
    std::uint64_t sum = 0;
    for (const auto& b : bytes) sum += b.at(step) - b.at(step - 1);
    return sum;
  }
};

Alone alone(std::size_t tokens, serve::ServeOptions options) {
  Alone out;
  options.on_step = [&](const serve::StepReport& r) {
    out.bytes[r.server].push_back(r.bytes);
    out.dealt_inline[r.server].push_back(r.dealt_inline);
    if (r.server != 0) return;
    out.at.emplace_back(r.rounds, r.bytes);
    out.offline.push_back(r.offline);
  };
  Service service(options);
  Outcome outcome;
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("client"), request_for(emma, tokens), outcome));
  service.run(std::move(clients));
  CHECK(outcome.error.empty());
  out.tokens = outcome.tokens;
  out.stats = service.stats;
  return out;
}

// Four different prompts, `tokens` tokens each.
std::vector<Asked> four_prompts(std::size_t tokens) {
  return {{emma, tokens},
          {emma.substr(0, 40), tokens},
          {"Mr. Knightley, a sensible man about", tokens},
          {"It is a truth universally acknowledged", tokens}};
}

std::uint64_t decoded_rows(const std::vector<Asked>& asked) {
  std::uint64_t rows = 0;
  for (const auto& a : asked) rows += a.tokens - 1;  // the first token comes from the prefill
  return rows;
}

}  // namespace

TEST_CASE("sessions in their decode phase step together, and each gets the tokens generate gives it") {
  const std::vector<Asked> asked = {{emma, 6},
                                    {emma.substr(0, 40), 3},
                                    {"Mr. Knightley, a sensible man about", 5},
                                    {"It is a truth universally acknowledged", 4}};
  serve::ServeOptions options;
  options.decode_lanes = 1;  // one step at a time: all the sessions in it
  const Served r = serve_all(options, asked);
  check_tokens(asked, r.outcomes);
  // Every decoded token was one row of a batched step, the same steps at
  // all three servers, and steps carried several sessions.
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(r.stats[id].batched_rows == decoded_rows(asked));
    CHECK(r.stats[id].batched_steps == r.stats[0].batched_steps);
  }
  MESSAGE(r.stats[0].batched_rows << " decoded tokens in " << r.stats[0].batched_steps << " batched steps, at most "
                                  << r.steps.widest() << " sessions in one");
  CHECK(r.stats[0].batched_steps < r.stats[0].batched_rows);
  CHECK(r.steps.widest() >= 3);
}

TEST_CASE("a session joins the batch while another decodes, and each leaves when done") {
  const std::vector<Asked> asked = {{emma, 8}, {"Mr. Knightley, a sensible man about", 3}};
  serve::ServeOptions options;
  options.decode_lanes = 1;
  StepLog steps;
  std::optional<serve::Signal> second_step;
  std::size_t first_steps = 0;
  options.on_step = [&](const serve::StepReport& r) {
    if (r.server != 0) return;
    steps.add(r.session, r.step, r.rounds);
    if (r.session == 0 && ++first_steps == 3) second_step->notify();  // its second decoded token
  };
  Service service(options);
  second_step.emplace(service.scheduler);
  std::vector<Outcome> outcomes(asked.size());
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("early"), request_for(asked[0].prompt, asked[0].tokens), outcomes[0]));
  Endpoint& late = service.connect("late");
  auto late_client = [&]() -> Task<void> {
    co_await second_step->wait();  // session 0 is decoding
    co_await ask(late, request_for(asked[1].prompt, asked[1].tokens), outcomes[1]);
  };
  clients.push_back(late_client());
  service.run(std::move(clients));
  check_tokens(asked, outcomes);
  CHECK(steps.together(0, 1));  // it joined a running batch...
  std::size_t alone_after = 0;  // ...and session 0 went on alone once it left
  for (const auto& [clock, sessions] : steps.sessions_at_clock)
    alone_after = sessions == std::set<std::uint64_t>{0} ? alone_after + 1 : 0;
  CHECK(alone_after >= 1);
  CHECK(service.stats[0].batched_rows == decoded_rows(asked));
}

TEST_CASE("a step takes at most max_batch sessions, and the waiting ones go first next") {
  const std::vector<Asked> asked = four_prompts(4);
  serve::ServeOptions options;
  options.max_batch = 2;
  options.decode_lanes = 1;
  const Served r = serve_all(options, asked);
  check_tokens(asked, r.outcomes);
  CHECK(r.steps.widest() == 2);
  CHECK(r.stats[0].batched_rows == decoded_rows(asked));
  CHECK(r.stats[0].batched_steps >= decoded_rows(asked) / 2);
}

TEST_CASE("two lanes: two batched steps in flight at once, each with half the sessions; the same tokens") {
  const std::vector<Asked> asked = four_prompts(6);
  // The baseline: the same steps of two sessions, one at a time.
  serve::ServeOptions one_lane;
  one_lane.max_batch = 2;
  one_lane.decode_lanes = 1;
  serve::ServeOptions two_lanes;
  two_lanes.decode_lanes = 2;  // max_batch 8: a lane's share of the four is two
  const Served one = serve_all(one_lane, asked);
  const Served two = serve_all(two_lanes, asked);
  check_tokens(asked, one.outcomes);
  check_tokens(asked, two.outcomes);
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(two.stats[id].batched_rows == decoded_rows(asked));
    CHECK(two.stats[id].batched_steps == two.stats[0].batched_steps);
  }
  // No step took more than its lane's share...
  CHECK(two.stats[0].batched_steps >= decoded_rows(asked) / 2);
  // ...and the lanes' steps shared their round trips: the decode ends at an
  // earlier round clock than the same steps run one after another.
  MESSAGE("last token at round " << two.steps.last_clock() << " with two lanes, " << one.steps.last_clock()
                                 << " with one");
  CHECK(double(two.steps.last_clock()) < 0.8 * double(one.steps.last_clock()));
}

TEST_CASE("decode_lanes must be 1 to 64") {
  serve::ServeOptions options;
  options.decode_lanes = 0;
  CHECK_THROWS_WITH_AS(Service{options}, doctest::Contains("decode_lanes is 0, it must be 1 to 64"), Error);
  options.decode_lanes = 65;
  CHECK_THROWS_WITH_AS(Service{options}, doctest::Contains("decode_lanes is 65"), Error);
}

TEST_CASE("max_batch 1: each session decodes on its own, no batched steps") {
  serve::ServeOptions options;
  options.max_batch = 1;
  const std::vector<Asked> asked = {{emma, 3}, {emma.substr(0, 40), 3}};
  const Served r = serve_all(options, asked);
  check_tokens(asked, r.outcomes);
  CHECK(r.stats[0].batched_steps == 0);
}

TEST_CASE("under dcf comparisons a session prefills on the circuit while others decode with DCF keys; the same tokens") {
  // Two sessions, the second joining while the first decodes: each
  // session's prefill runs on the circuit (compare_on_circuit is per
  // stream), the batched steps with DCF keys dealt inline.
  const std::vector<Asked> asked = {{emma, 5}, {emma.substr(0, 40), 3}};
  serve::ServeOptions dcf;
  dcf.rss3.comparisons = Rss3Comparisons::dcf;
  dcf.decode_lanes = 1;  // one step at a time, so that the two step together
  const Served served = serve_all(dcf, asked);
  check_tokens(asked, served.outcomes);
  CHECK(served.steps.widest() == 2);  // the two sessions stepped together

  // One session alone, step by step at server 0: the prefill and its token
  // cost what they cost on the circuit, to the round; a decode step fewer.
  const auto on_circuit = alone(3, {}).at, with_dcf = alone(3, dcf).at;
  REQUIRE(on_circuit.size() == 3);
  REQUIRE(with_dcf.size() == 3);
  CHECK(with_dcf[0].first == on_circuit[0].first);
  CHECK(with_dcf[0].second == on_circuit[0].second);
  CHECK(with_dcf[2].first - with_dcf[1].first < on_circuit[2].first - on_circuit[1].first);
  MESSAGE("server 0, rounds of the prefill and its token " << with_dcf[0].first << "; of decode step 2: circuit "
                                                           << on_circuit[2].first - on_circuit[1].first << ", dcf "
                                                           << with_dcf[2].first - with_dcf[1].first);
}

TEST_CASE("dcf+offline: the batched steps draw their keys from a store refilled between steps; the same tokens") {
  serve::ServeOptions dcf;
  dcf.rss3.comparisons = Rss3Comparisons::dcf;
  serve::ServeOptions stored = dcf;
  stored.rss3.offline_budget = std::uint64_t{256} << 20;
  stored.refill_steps_ahead = 3;

  // Two sessions stepping together get generate's tokens.
  const std::vector<Asked> asked = {{emma, 6}, {emma.substr(0, 40), 4}};
  const Served served = serve_all(stored, asked);
  check_tokens(asked, served.outcomes);
  CHECK(served.steps.widest() == 2);
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(served.stats[id].comparisons_from_store > 0);
    CHECK(served.stats[id].offline.refills == served.stats[0].offline.refills);  // collective
  }

  // One session alone, 10 tokens (9 decode steps). The first decode step has
  // no estimate and deals inline; steps 3 and 4 need kinds of keys no
  // earlier step used (the policy's work differs between steps, and the
  // softmax's tournament plan with the cache's length), and deal those
  // inline; every later step finds all its keys in the store, which is
  // topped up ahead, not before every step.
  const std::size_t tokens = 10;
  const Alone first_only = alone(2, stored), with_store = alone(tokens, stored), inline_keys = alone(tokens, dcf);
  CHECK(with_store.tokens == inline_keys.tokens);
  REQUIRE(with_store.at.size() == tokens);
  REQUIRE(inline_keys.at.size() == tokens);
  std::string refilled_before;  // decode steps a refill came before
  for (std::size_t step = 1; step < tokens; ++step)
    if (with_store.offline[step].refills > with_store.offline[step - 1].refills) refilled_before += " " + std::to_string(step);
  MESSAGE("refills before decode steps" << refilled_before);
  CHECK(with_store.offline[1].refills == 0);  // no estimate yet
  CHECK(with_store.offline[2].refills == 1);
  for (PartyId id = 0; id < 3; ++id) {
    const serve::ServeStats& s = with_store.stats[id];
    const auto& dealt = with_store.dealt_inline[id];
    INFO("server " << id);
    CHECK(s.offline.refills == with_store.stats[0].offline.refills);
    CHECK(s.offline.refills < tokens - 2);  // not before every step from step 2 on
    CHECK(s.offline.bytes > 0);
    CHECK(s.comparisons_from_store > 0);
    CHECK(dealt[1] - dealt[0] == first_only.stats[id].comparisons_inline);  // the first decode step: all inline
    CHECK(dealt[1] > 0);
    CHECK(dealt[2] == dealt[1]);  // step 2: all from the store
    for (std::size_t step = 5; step < tokens; ++step) CHECK(dealt[step] == dealt[4]);
    CHECK(s.comparisons_inline == dealt.back());
  }
  // Online, a step from the store moves offsets, not keys: all three
  // servers' bytes, against the same step with keys dealt inline.
  for (std::size_t step = 4; step < tokens; ++step) {
    INFO("decode step " << step);
    CHECK(4 * with_store.step_bytes(step) < inline_keys.step_bytes(step));
    // Ops plan on the filled store's costs (Rss3DcfStoreCosts): no more rounds.
    CHECK(with_store.at[step].first - with_store.at[step - 1].first <=
          inline_keys.at[step].first - inline_keys.at[step - 1].first);
  }
  MESSAGE("online rounds of decode step 5 at server 0: inline keys "
          << inline_keys.at[5].first - inline_keys.at[4].first << ", from the store "
          << with_store.at[5].first - with_store.at[4].first << "; online bytes (three servers): "
          << inline_keys.step_bytes(5) << " and " << with_store.step_bytes(5) << "; offline at server 0 "
          << with_store.stats[0].offline.bytes << " bytes in " << with_store.stats[0].offline.refills << " refills");
}

TEST_CASE("exact+offline: the batched steps truncate with pairs made between steps; fewer rounds, the same tokens") {
  serve::ServeOptions exact;  // exact truncation is the default
  serve::ServeOptions pairs = exact;
  pairs.rss3.truncation_pairs_budget = std::uint64_t{256} << 20;

  // Two sessions stepping together get generate's tokens.
  const std::vector<Asked> asked = {{emma, 6}, {emma.substr(0, 40), 4}};
  const Served served = serve_all(pairs, asked);
  check_tokens(asked, served.outcomes);
  CHECK(served.steps.widest() == 2);
  for (PartyId id = 0; id < 3; ++id) {
    CHECK(served.stats[id].truncations_with_pairs > 0);
    CHECK(served.stats[id].truncations_with_pairs == served.stats[0].truncations_with_pairs);  // collective
    CHECK(served.stats[id].offline.refills == served.stats[0].offline.refills);
  }

  // One session alone, 8 tokens (7 decode steps). The first decode step has
  // no plan and truncates in two rounds; the refill before step 2 makes
  // pairs for its calls, and from then on every exact fused truncation of
  // a step takes one round.
  const std::size_t tokens = 8;
  const Alone first_only = alone(2, pairs), with_pairs = alone(tokens, pairs), without = alone(tokens, exact);
  CHECK(with_pairs.tokens == without.tokens);
  REQUIRE(with_pairs.at.size() == tokens);
  REQUIRE(without.at.size() == tokens);
  CHECK(with_pairs.offline[1].refills == 0);  // nothing to plan from yet
  CHECK(with_pairs.offline[2].refills == 1);
  for (PartyId id = 0; id < 3; ++id) {
    INFO("server " << id);
    const serve::ServeStats &s = with_pairs.stats[id], &first = first_only.stats[id];
    CHECK(first.truncations_with_pairs == 0);
    CHECK(first.truncations_in_two_rounds > 0);
    // Only the first decode step's truncations took two rounds.
    CHECK(s.truncations_in_two_rounds == first.truncations_in_two_rounds);
    CHECK(s.truncations_with_pairs > 0);
    CHECK(s.offline.bytes > 0);
    CHECK(s.offline.refills < tokens - 2);  // pairs for several steps at a time (refill_steps_ahead)
    CHECK(without.stats[id].truncations_with_pairs == 0);
    CHECK(without.stats[id].offline.refills == 0);
  }
  for (std::size_t step = 2; step < tokens; ++step) {
    INFO("decode step " << step);
    const std::uint64_t rounds_with = with_pairs.at[step].first - with_pairs.at[step - 1].first,
                        rounds_without = without.at[step].first - without.at[step - 1].first;
    CHECK(rounds_with < rounds_without);
  }
  MESSAGE("online rounds of decode step 4 at server 0: exact " << without.at[4].first - without.at[3].first
                                                              << ", with pairs " << with_pairs.at[4].first - with_pairs.at[3].first
                                                              << "; offline at server 0 " << with_pairs.stats[0].offline.bytes
                                                              << " bytes in " << with_pairs.stats[0].offline.refills << " refills");
}

TEST_CASE("truncation pairs need exact truncation and batched steps") {
  serve::ServeOptions options;
  options.rss3.truncation_pairs_budget = 1 << 20;
  {  // Service{} always truncates exactly; a server of its own here
    Scheduler scheduler;
    InProcessNetwork mesh{scheduler, 3};
    TimerLoop timers{scheduler};
    serve::ServeOptions probabilistic = options;
    probabilistic.model_dir = fixture_dir();
    probabilistic.rss3.exact_truncation = false;
    CHECK_THROWS_WITH_AS(serve::Server(scheduler, mesh.endpoint(0), timers.timers(), probabilistic),
                         doctest::Contains("which is off"), Error);
  }
  options.max_batch = 1;
  CHECK_THROWS_WITH_AS(Service{options}, doctest::Contains("they need max_batch > 1"), Error);
}

TEST_CASE("an offline store of DCF keys needs dcf comparisons and batched steps") {
  serve::ServeOptions options;
  options.rss3.offline_budget = 1 << 20;
  CHECK_THROWS_WITH_AS(Service{options}, doctest::Contains("comparisons are not dcf"), Error);
  options.rss3.comparisons = Rss3Comparisons::dcf;
  options.max_batch = 1;
  CHECK_THROWS_WITH_AS(Service{options}, doctest::Contains("needs max_batch > 1"), Error);
}
