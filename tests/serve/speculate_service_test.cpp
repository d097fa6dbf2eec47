// Speculative verification in the service: a speculating client drafts in
// the clear and sends each step's rows as shares; its session's rows sit in
// the batched steps beside other sessions' single rows, and each client
// still gets exactly the tokens generate gives its prompt. A speculating
// client that misbehaves ends only its own session.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"
#include "service_harness.hpp"

using namespace mpcache;
using namespace mpcache::serve_test;

namespace {

// A drafter that knows the text (every draft right) or always guesses one
// token that is never chosen next (every draft wrong, save by chance).
Drafter oracle(std::vector<std::uint32_t> prompt, std::vector<std::uint32_t> text) {
  return [prompt, text](std::span<const std::uint32_t> context, std::size_t count) {
    std::vector<std::uint32_t> out;
    for (std::size_t at = context.size() - prompt.size(); out.size() < count; ++at)
      out.push_back(at < text.size() ? text[at] : 0);
    return out;
  };
}

Drafter contrarian(std::vector<std::uint32_t> prompt, std::vector<std::uint32_t> text) {
  return [prompt, text](std::span<const std::uint32_t> context, std::size_t count) {
    std::vector<std::uint32_t> out;
    for (std::size_t at = context.size() - prompt.size(); out.size() < count; ++at)
      out.push_back(at < text.size() ? (text[at] + 1) % 256 : 0);
    return out;
  };
}

struct Ran {
  std::vector<Outcome> outcomes;
  std::vector<std::vector<std::size_t>> accepted;
};

Task<void> ask_speculating(Endpoint& endpoint, serve::ClientRequest request, Outcome& out,
                           std::vector<std::size_t>& accepted) {
  try {
    auto r = co_await serve::request(endpoint, request);
    out.tokens = r.tokens;
    out.end = r.end;
    accepted = r.accepted;
  } catch (const Error& e) {
    out.error = e.what();
  }
}

Ran run_all(Service& service, const std::vector<serve::ClientRequest>& requests) {
  Ran ran;
  ran.outcomes.resize(requests.size());
  ran.accepted.resize(requests.size());
  std::vector<Task<void>> clients;
  for (std::size_t c = 0; c < requests.size(); ++c)
    clients.push_back(ask_speculating(service.connect("client " + std::to_string(c)), requests[c], ran.outcomes[c],
                                      ran.accepted[c]));
  service.run(std::move(clients));
  return ran;
}

}  // namespace

TEST_CASE("speculating and plain clients share batched steps and each gets generate's tokens") {
  constexpr std::size_t tokens = 7;
  const std::vector<std::string> prompts = {emma, "Mr. Knightley, a sensible man about", emma.substr(0, 40),
                                            "It is a truth universally acknowledged"};
  std::vector<std::vector<std::uint32_t>> expected;
  for (const auto& p : prompts) expected.push_back(generated(bytes_of(p), tokens));
  std::vector<serve::ClientRequest> requests;
  for (const auto& p : prompts) requests.push_back(request_for(p, tokens));
  requests[0].speculate = 3;  // every draft right: 1 + 3 tokens a step
  requests[0].draft = oracle(bytes_of(prompts[0]), expected[0]);
  requests[2].speculate = 2;  // every draft wrong: 1 token a step, as plain decoding
  requests[2].draft = contrarian(bytes_of(prompts[2]), expected[2]);
  Service service;
  const Ran ran = run_all(service, requests);
  for (std::size_t c = 0; c < prompts.size(); ++c) {
    INFO("client " << c << ": " << ran.outcomes[c].error);
    CHECK(ran.outcomes[c].error.empty());
    CHECK(ran.outcomes[c].tokens == expected[c]);
  }
  // 7 tokens: the prefill's, then steps of 4 and of the 2 the budget leaves.
  CHECK(ran.accepted[0] == std::vector<std::size_t>{3, 1});
  CHECK(ran.accepted[2] == std::vector<std::size_t>(tokens - 1, 0));
  CHECK(ran.accepted[1].empty());
  for (PartyId s = 0; s < 3; ++s) {
    INFO("server " << s);
    CHECK(service.stats[s].speculative_steps > 0);
    CHECK(service.stats[s].mixed_steps > 0);  // speculating and plain sessions in one step
    CHECK(service.stats[s].sessions_done == 4);
  }
}

TEST_CASE("a speculating client's stop token ends its session where generate ends") {
  const auto prompt = bytes_of(emma);
  const auto free_run = generated(prompt, 6);
  const std::vector<std::uint32_t> stops = {free_run[2]};
  const auto expected = generated(prompt, 6, "mpcache", stops);
  REQUIRE(expected.size() < 6);
  auto request = request_for(emma, 6);
  request.stop_tokens = stops;
  request.speculate = 4;  // the stop token arrives inside the first verified step
  request.draft = oracle(prompt, free_run);
  Service service;
  const Ran ran = run_all(service, {request, request_for(emma, 3)});
  CHECK(ran.outcomes[0].error.empty());
  CHECK(ran.outcomes[0].tokens == expected);
  CHECK(ran.outcomes[0].end == serve::ClientEnd::eos);
  CHECK(ran.outcomes[1].tokens == generated(prompt, 3));
}

// A hand-made request for speculating `k` tokens a step (the library's
// client refuses k > 16 itself), and server 0's refusal.
Task<void> ask_raw(Endpoint& client, std::uint64_t k, std::string& refusal) {
  serve::ServeRequest q;
  q.nonce = {7, 7};
  q.prompt_length = 4;
  q.new_tokens = 3;
  q.policy = "mpcache";
  q.speculate = k;
  for (PartyId s = 0; s < 3; ++s) client.send(s, serve::request_stream, q.encode());
  auto r = serve::Reply::decode(co_await client.recv(0, serve::reply_stream), "server 0");
  if (r.kind == serve::ReplyKind::refused) refusal = r.text();
}

TEST_CASE("speculation the service cannot run is refused by name, the other clients served (h2o among them)") {
  auto too_many = request_for(emma, 4);
  too_many.speculate = max_speculated_tokens + 1;
  {
    Scheduler scheduler;
    InProcessNetwork alone(scheduler, 4);
    CHECK_THROWS_WITH_AS(sync_wait(scheduler, serve::request(alone.endpoint(3), too_many)),
                         doctest::Contains("speculate 17 tokens a step, outside 0..16"), Error);
  }
  serve::ServeOptions options;
  Service service(options);
  auto observed = request_for(emma, 4);
  observed.speculate = 2;
  observed.policy = "h2o";
  auto fine = request_for(emma, 4);
  fine.speculate = 2;
  std::string refusal;
  std::vector<Task<void>> raw;
  raw.push_back(ask_raw(service.connect("raw"), max_speculated_tokens + 1, refusal));
  Ran ran;
  ran.outcomes.resize(3);
  ran.accepted.resize(3);
  const std::vector<serve::ClientRequest> requests = {observed, fine, request_for(emma, 3)};
  for (std::size_t c = 0; c < requests.size(); ++c)
    raw.push_back(ask_speculating(service.connect("client " + std::to_string(c)), requests[c], ran.outcomes[c],
                                  ran.accepted[c]));
  service.run(std::move(raw));
  CHECK(refusal == "bad request: speculation of 17 tokens a step, outside 0..16");
  ran.outcomes.insert(ran.outcomes.begin(), Outcome{});
  // H2O selects by the attention it observed: its rows take turns per
  // layer (kv::LayerAdopting), in the batched step beside the others.
  CHECK(ran.outcomes[1].error.empty());
  CHECK(ran.outcomes[1].tokens == generated(bytes_of(emma), 4, "h2o"));
  CHECK(ran.outcomes[2].error.empty());
  CHECK(ran.outcomes[2].tokens == generated(bytes_of(emma), 4));
  CHECK(ran.outcomes[3].tokens == generated(bytes_of(emma), 3));
}

TEST_CASE("a service that does not batch refuses speculation; sampling cannot speculate") {
  serve::ServeOptions options;
  options.max_batch = 1;
  Service service(options);
  auto speculating = request_for(emma, 3);
  speculating.speculate = 2;
  auto sampled = request_for(emma, 3);
  sampled.speculate = 2;
  sampled.temperature = 0.5;
  const Ran ran = run_all(service, {speculating, sampled, request_for(emma, 3)});
  CHECK(ran.outcomes[0].error.find("this service does not batch") != std::string::npos);
  CHECK(ran.outcomes[1].error.find("cannot sample") != std::string::npos);
  CHECK(ran.outcomes[2].tokens == generated(bytes_of(emma), 3));
}

TEST_CASE("malformed or missing drafted rows end that session only") {
  serve::ServeOptions options;
  options.prompt_within = std::chrono::milliseconds(500);
  Service service(options);
  auto garbage = request_for(emma, 5);
  garbage.speculate = 2;
  garbage.fault = serve::ClientRequest::Fault::garbage_drafts;
  auto stall = request_for(emma, 5);
  stall.speculate = 2;
  stall.fault = serve::ClientRequest::Fault::stall_drafts;
  auto good = request_for(emma, 5);
  good.speculate = 2;
  const Ran ran = run_all(service, {garbage, stall, good, request_for(emma, 5)});
  INFO(ran.outcomes[0].error);
  INFO(ran.outcomes[1].error);
  CHECK(ran.outcomes[0].error.find("malformed drafted rows") != std::string::npos);
  CHECK(ran.outcomes[1].error.find("sent no drafted rows within 500 ms") != std::string::npos);
  const auto expected = generated(bytes_of(emma), 5);
  CHECK(ran.outcomes[2].error.empty());
  CHECK(ran.outcomes[2].tokens == expected);
  CHECK(ran.outcomes[3].error.empty());
  CHECK(ran.outcomes[3].tokens == expected);
  CHECK(service.stats[0].sessions_failed == 2);
  CHECK(service.stats[0].sessions_done == 2);
}
