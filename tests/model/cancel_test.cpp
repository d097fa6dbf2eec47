// Cancelling a private generation: the client's caller stops it after the
// first decoded token, and every party (client, model owner, third party or
// dealer) unwinds with Error(cancelled) naming the client, in one process
// and over loopback TCP with the stop requested from another thread.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <future>
#include <thread>
#include <doctest/doctest.h>
import mpcache;

#include "../support/tcp_parties.hpp"

using namespace mpcache;
using mpcache::testing::contains;

namespace {
const std::filesystem::path fixture = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";

GenerationJob fixture_job(PartyId id, ProtocolBackend protocol) {
  GenerationJob job;
  job.model_dir = fixture;
  job.mode.backend = protocol;
  job.budget = 48;
  job.new_tokens = 6;
  job.rss3 = {.insecure_seed = 3};
  job.add2 = {.insecure_seed = 3};
  if (id == 0) {
    std::vector<std::uint32_t> prompt;
    for (unsigned char ch : std::string("It is a truth universally acknowledged")) prompt.push_back(ch);
    job.prompt = prompt;
  }
  return job;
}

// One party's generation, returning the text of the error it ended with.
Task<std::string> generation_error(Endpoint& endpoint, GenerationJob job, GenerationObserver observer,
                                   std::stop_token stop, std::size_t* steps) {
  try {
    auto result = co_await generate_party(endpoint, std::move(job), std::move(observer), std::move(stop));
    *steps = result.new_tokens;
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::cancelled);
    co_return e.what();
  }
  co_return "";
}
}  // namespace

TEST_CASE("a generation stopped by the client's caller unwinds every party with Error(cancelled)") {
  for (auto protocol : {ProtocolBackend::rss3, ProtocolBackend::add2}) {
    CAPTURE(protocol_backend_name(protocol));
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    std::stop_source source;
    std::size_t steps_seen = 0, finished[3] = {};
    GenerationObserver observer;
    observer.step = [&](const GenerationStep& s) {
      steps_seen = s.step + 1;
      if (s.step == 1) source.request_stop();  // after the first decoded token
    };
    std::vector<Task<std::string>> parties;
    for (PartyId id = 0; id < 3; ++id)
      parties.push_back(generation_error(network.endpoint(id), fixture_job(id, protocol),
                                         id == 0 ? observer : GenerationObserver{},
                                         id == 0 ? source.get_token() : std::stop_token{}, &finished[id]));
    const auto errors = sync_wait(scheduler, when_all(std::move(parties)));
    CHECK(steps_seen == 2);  // the prefill and one decode step, of 6
    CHECK(errors[0] == "cancelled: generation stopped by its caller before step 2");
    for (PartyId id : {1, 2}) {
      // The add2 dealer waits for nobody after set-up: it may have dealt the
      // whole generation already, and then it has nothing to cancel.
      if (protocol == ProtocolBackend::add2 && id == add2_dealer && errors[id].empty()) {
        CHECK(finished[id] == 6);
        continue;
      }
      CHECK(errors[id] == "cancelled: party " + std::to_string(id) +
                              ": party 0 cancelled: generation stopped by its caller before step 2");
    }
  }
}

TEST_CASE("over TCP, a stop requested from another thread mid-generation cancels all three processes' loops") {
  std::promise<void> first_step;
  std::stop_source source;
  std::thread stopper([&] {
    // Bounded: if the generation failed before its first step, stop anyway.
    (void)first_step.get_future().wait_for(std::chrono::seconds(60));
    source.request_stop();
  });
  std::vector<ConnectOptions> connect(3);
  for (auto& c : connect) c.encrypted = false, c.timeout = std::chrono::milliseconds(10000);
  std::size_t finished[3] = {};
  auto results = testing::run_cluster_parties<std::string>(
      testing::loopback_parties(3), connect, {}, [&](PartyId id, Endpoint& endpoint, TcpTransport&) {
        GenerationObserver observer;
        if (id == 0)
          observer.step = [&](const GenerationStep& s) {
            if (s.step == 0) first_step.set_value();
          };
        GenerationJob job = fixture_job(id, ProtocolBackend::rss3);
        job.new_tokens = 60;  // far more steps than the stopping thread needs to act
        return generation_error(endpoint, std::move(job), std::move(observer),
                                id == 0 ? source.get_token() : std::stop_token{}, &finished[id]);
      });
  stopper.join();
  for (PartyId id = 0; id < 3; ++id) {
    CAPTURE(id);
    REQUIRE(results[id].error.empty());  // ended by its own Error(cancelled), not by another error
    CHECK(finished[id] == 0);            // nobody ran to the end
    CHECK(contains(*results[id].value, "cancelled: "));
  }
  // The client stopped itself (mid-step at the end of a tick, or before a
  // step); the others name it.
  CHECK(contains(*results[0].value, "stopped by its caller"));
  for (PartyId id : {1, 2}) CHECK(contains(*results[id].value, "party 0 cancelled: "));
}
