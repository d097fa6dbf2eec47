// The private inference service in one process: three servers (mpcache.serve
// Server) over an in-process mesh, clients over in-process channels of their
// own, on one loop. Each client must get exactly the tokens generate_party
// gives its prompt; a bad or vanished client ends only its own session.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"

using namespace mpcache;
using testing::fixture_dir;

#include "service_harness.hpp"

using namespace mpcache::serve_test;

TEST_CASE("four clients at once each get the tokens generate gives their prompt") {
  const std::vector<std::string> prompts = {emma, emma.substr(0, 40), "Mr. Knightley, a sensible man about",
                                            "It is a truth universally acknowledged"};
  constexpr std::size_t tokens = 4;
  Service service;
  std::vector<Outcome> outcomes(prompts.size());
  std::vector<Task<void>> clients;
  for (std::size_t c = 0; c < prompts.size(); ++c)
    clients.push_back(ask(service.connect("client " + std::to_string(c)), request_for(prompts[c], tokens), outcomes[c]));
  service.run(std::move(clients));
  for (std::size_t c = 0; c < prompts.size(); ++c) {
    INFO("client " << c << ": " << outcomes[c].error);
    CHECK(outcomes[c].error.empty());
    CHECK(outcomes[c].tokens == generated(bytes_of(prompts[c]), tokens));
  }
  CHECK(service.logged("server 0: session 3 for client"));  // four sessions, numbered by the leader
}

TEST_CASE("a stop token ends the session after the step generate ends at") {
  const auto prompt = bytes_of(emma);
  const auto free_run = generated(prompt, 5);
  REQUIRE(free_run.size() == 5);
  const std::vector<std::uint32_t> stops = {free_run[2]};
  const auto expected = generated(prompt, 5, "mpcache", stops);
  REQUIRE(expected.size() < 5);
  Service service;
  Outcome out;
  auto request = request_for(emma, 5);
  request.stop_tokens = stops;
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("eos client"), request, out));
  service.run(std::move(clients));
  CHECK(out.error.empty());
  CHECK(out.tokens == expected);
  CHECK(out.end == serve::ClientEnd::eos);
}

TEST_CASE("requests the service cannot run are refused before any MPC work, naming why") {
  serve::ServeOptions options;
  options.max_new_tokens = 8;
  Service service(options);
  Outcome too_many, unknown_policy, too_long, fine;
  auto many = request_for(emma, 9);
  auto policy = request_for(emma, 2);
  policy.policy = "no-such-policy";
  auto long_prompt = request_for(std::string(1000, 'a'), 2);
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("greedy"), many, too_many));
  clients.push_back(ask(service.connect("confused"), policy, unknown_policy));
  clients.push_back(ask(service.connect("verbose"), long_prompt, too_long));
  clients.push_back(ask(service.connect("fine"), request_for(emma, 2), fine));
  service.run(std::move(clients));
  CHECK(too_many.error.find("server 0 refused the request: bad request: 9 new tokens (this service allows at most 8)") !=
        std::string::npos);
  CHECK(unknown_policy.error.find("no-such-policy") != std::string::npos);
  CHECK(too_long.error.find("exceed the model's") != std::string::npos);
  CHECK(fine.error.empty());
  CHECK(fine.tokens == generated(bytes_of(emma), 2));
  CHECK(service.logged("server 0: session 0 for fine"));  // the refused ones never got a session
}

TEST_CASE("a prompt length near 2^64 is refused, not wrapped past the model's positions") {
  const ModelConfig config = ModelConfig::from_json_file(fixture_dir() / "config.json");
  serve::ServeOptions options;
  serve::ServeRequest q;
  q.prompt_length = 4;
  q.new_tokens = 2;
  q.policy = "mpcache";
  CHECK(serve::request_problem(options, config, q).empty());
  q.prompt_length = ~std::uint64_t{0};  // + 2 new tokens wraps to 1
  CHECK(serve::request_problem(options, config, q).find("exceed the model's") != std::string::npos);
  q.prompt_length = config.max_positions;  // fits alone, not with the tokens
  CHECK(serve::request_problem(options, config, q).find("exceed the model's") != std::string::npos);
}

TEST_CASE("over the session limit a request queues, and past the queue it is refused busy") {
  serve::ServeOptions options;
  options.max_sessions = 1;
  options.max_queued = 1;
  Service service(options);
  std::vector<Outcome> out(3);
  std::vector<Task<void>> clients;
  for (std::size_t c = 0; c < 3; ++c)
    clients.push_back(ask(service.connect("client " + std::to_string(c)), request_for(emma, 2), out[c]));
  service.run(std::move(clients));
  const auto expected = generated(bytes_of(emma), 2);
  CHECK(out[0].tokens == expected);  // runs at once
  CHECK(out[1].tokens == expected);  // queued, then runs
  CHECK(out[2].error.find("refused the request: busy: 1 sessions running and 1 queued") != std::string::npos);
}

TEST_CASE("a client whose prompt share is garbage ends only its own session, at every server") {
  Service service;
  Outcome good;
  std::string bad_error;
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("good"), request_for(emma, 3), good));
  Endpoint& bad = service.connect("mallory");
  auto mallory = [&]() -> Task<void> {
    co_await send_request_and_accept(bad, {7, 7});
    // Server 1 gets 5 bytes where 4 x vocab values belong.
    auto parts = client_shares::split(ring_zeros({4, 256}));
    parts[1].resize(5);
    for (PartyId s = 0; s < 3; ++s) bad.send(s, serve::prompt_stream, parts[s]);
    bad_error = co_await failures_from_servers(bad);
  };
  clients.push_back(mallory());
  service.run(std::move(clients));
  CHECK(good.error.empty());
  CHECK(good.tokens == generated(bytes_of(emma), 3));
  // Server 1 names the bad share; the others learn it through the scope's cancellation.
  CHECK(bad_error.find("server 1: protocol error: client share for server 1: truncated") != std::string::npos);
  CHECK(bad_error.find("server 0: ") != std::string::npos);
  CHECK(bad_error.find("server 2: ") != std::string::npos);
  CHECK(service.logged("server 1: session"));
}

TEST_CASE("a client that never sends its prompt is told why at every server, and only its session ends") {
  serve::ServeOptions options;
  options.prompt_within = std::chrono::milliseconds(300);
  Service service(options);
  Outcome good;
  std::string staller_error;
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("good"), request_for(emma, 3), good));
  Endpoint& stalling = service.connect("staller");
  auto staller = [&]() -> Task<void> {
    co_await send_request_and_accept(stalling, {5, 5});
    // No prompt shares: each server's deadline fails the session and says why.
    staller_error = co_await failures_from_servers(stalling);
  };
  clients.push_back(staller());
  service.run(std::move(clients));
  CHECK(good.error.empty());
  CHECK(good.tokens == generated(bytes_of(emma), 3));
  INFO(staller_error);
  // The first server to time out tells the client; the others may learn it
  // first from that server's cancellation of the session.
  CHECK(staller_error.find("sent no prompt shares within 300 ms") != std::string::npos);
  CHECK(service.logged("sent no prompt shares within 300 ms"));
}

TEST_CASE("a client that vanishes mid-session ends only its own session") {
  Service service;
  Outcome good;
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("good"), request_for(emma, 4), good));
  Endpoint& leaving = service.connect("leaver");
  InProcessNetwork& channel = *service.channels.back();
  auto leaver = [&]() -> Task<void> {
    serve::ClientRequest r = request_for(emma.substr(0, 30), 4);
    // Once the first token's parts arrive, the client is gone.
    auto first_token = [&]() -> Task<void> {
      for (PartyId s = 0; s < 3; ++s) (void)co_await leaving.recv(s, serve::reply_stream);  // accepted
      for (PartyId s = 0; s < 3; ++s) (void)co_await leaving.recv(s, serve::reply_stream);  // the first token
      for (PartyId s = 0; s < 3; ++s) channel.cut(3, s), channel.cut(s, 3);
    };
    serve::ServeRequest q;
    q.nonce = {9, 9};
    q.prompt_length = r.prompt.size();
    q.new_tokens = 4;
    q.policy = "mpcache";
    for (PartyId s = 0; s < 3; ++s) leaving.send(s, serve::request_stream, q.encode());
    RingTensor hot = ring_zeros({r.prompt.size(), 256});
    for (std::size_t i = 0; i < r.prompt.size(); ++i) hot(i, r.prompt[i]) = 1;
    auto parts = client_shares::split(hot);
    for (PartyId s = 0; s < 3; ++s) leaving.send(s, serve::prompt_stream, parts[s]);
    co_await first_token();
  };
  clients.push_back(leaver());
  service.run(std::move(clients));
  CHECK(good.error.empty());
  CHECK(good.tokens == generated(bytes_of(emma), 4));
  CHECK(service.logged("went away"));
}

TEST_CASE("a decoded token's critical path no longer goes through the client: rounds per token before and after") {
  constexpr std::size_t tokens = 4;
  const auto prompt = bytes_of(emma);
  // Before: generate_party, the client a computing party that learns each
  // token and inputs it again. Critical path: the largest clock of any party.
  std::array<std::vector<std::uint64_t>, 3> generate_clocks;
  {
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
      GenerationJob job;
      job.model_dir = fixture_dir();
      job.new_tokens = tokens;
      job.rss3 = {.exact_truncation = true, .insecure_seed = 5};
      if (id == 0) job.prompt = prompt;
      GenerationObserver observer;
      observer.step = [&, id](const GenerationStep& s) { generate_clocks[id].push_back(s.clock_after); };
      co_return co_await generate_party(network.endpoint(id), std::move(job), std::move(observer));
    });
  }
  // After: the service, the token a secret one-hot row at the servers. The
  // client sends its request and prompt, then reads nothing until all three
  // servers have chosen every token: had a step needed the client, the loop
  // would report a deadlock.
  std::array<std::vector<std::uint64_t>, 3> serve_clocks;
  serve::ServeOptions options;
  options.max_batch = 1;  // each session's steps its own, as generate's (batching moves a step's clock by +-1)
  std::size_t finished = 0;
  std::optional<serve::Signal> all_chosen;
  options.on_step = [&](const serve::StepReport& r) {
    serve_clocks[r.server].push_back(r.rounds);
    if (r.step + 1 == tokens && ++finished == 3) all_chosen->notify();
  };
  Service service(options);
  all_chosen.emplace(service.scheduler);
  Endpoint& client = service.connect("patient");
  std::vector<std::uint32_t> got;
  auto patient = [&]() -> Task<void> {
    serve::ServeRequest q;
    q.nonce = {1, 2};
    q.prompt_length = prompt.size();
    q.new_tokens = tokens;
    q.policy = "mpcache";
    for (PartyId s = 0; s < 3; ++s) client.send(s, serve::request_stream, q.encode());
    for (PartyId s = 0; s < 3; ++s) (void)co_await client.recv(s, serve::reply_stream);  // accepted
    RingTensor hot = ring_zeros({prompt.size(), 256});
    for (std::size_t i = 0; i < prompt.size(); ++i) hot(i, prompt[i]) = 1;
    auto parts = client_shares::split(hot);
    for (PartyId s = 0; s < 3; ++s) client.send(s, serve::prompt_stream, parts[s]);
    co_await all_chosen->wait();
    for (std::size_t k = 0; k < tokens; ++k) {
      std::array<std::vector<std::byte>, 3> token_parts;
      for (PartyId s = 0; s < 3; ++s) token_parts[s] = serve::Reply::decode(co_await client.recv(s, serve::reply_stream), "").body;
      got.push_back(static_cast<std::uint32_t>(client_shares::reconstruct(token_parts, {1, 1})(0, 0)));
    }
  };
  std::vector<Task<void>> clients;
  clients.push_back(patient());
  service.run(std::move(clients));
  CHECK(got == generated(prompt, tokens));
  auto critical = [](const std::array<std::vector<std::uint64_t>, 3>& clocks, std::size_t k) {
    return std::max({clocks[0].at(k), clocks[1].at(k), clocks[2].at(k)});
  };
  const std::uint64_t before = critical(generate_clocks, tokens - 1) - critical(generate_clocks, 0);
  const std::uint64_t after = critical(serve_clocks, tokens - 1) - critical(serve_clocks, 0);
  MESSAGE("rounds of " << tokens - 1 << " decoded tokens: generate (client in the loop) " << before << ", service "
                       << after);
  CHECK(after <= before);
}
