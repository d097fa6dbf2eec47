// Which failures a client may retry (serve::RequestError::retryable), and
// the retry loop (serve::with_retries): a retry never hands a token to the
// caller twice, and says when tokens had already been streamed.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"

using namespace mpcache;
using testing::fixture_dir;

#include "service_harness.hpp"

using namespace mpcache::serve_test;

namespace {

struct Failure {
  std::string what;
  bool retryable = false;
  bool thrown = false;
};

Task<void> ask_for_failure(Endpoint& endpoint, serve::ClientRequest request, Failure& out) {
  try {
    (void)co_await serve::request(endpoint, request);
  } catch (const serve::RequestError& e) {
    out = {e.what(), e.retryable(), true};
  }
}

serve::ClientResult result_of(std::vector<std::uint32_t> tokens) {
  serve::ClientResult r;
  r.tokens = std::move(tokens);
  return r;
}

// An attempt that streams `tokens`, then fails (retryably or not) unless `fails` is empty.
struct FakeAttempt {
  std::vector<std::uint32_t> tokens;
  std::string fails;
  bool retryable = true;
};

struct Retried {
  std::vector<std::uint32_t> handed;  // what on_token saw
  std::vector<std::string> notes;     // on_retry
  std::size_t attempts = 0;
  std::string error;
  bool error_retryable = false;
};

Retried run_fake(const std::vector<FakeAttempt>& attempts, std::size_t retries, std::stop_token stop = {}) {
  Retried out;
  serve::RetryOptions retry;
  retry.retries = retries;
  retry.wait = std::chrono::milliseconds(0);
  retry.on_retry = [&](const std::string& note) { out.notes.push_back(note); };
  std::size_t n = 0;
  try {
    const auto r = serve::with_retries(
        retry, stop,
        [&](const std::function<void(std::uint32_t)>& sink) {
          const FakeAttempt& a = attempts.at(n++);
          for (auto t : a.tokens) sink(t);
          if (!a.fails.empty()) throw serve::RequestError(ErrorCode::network, a.fails, a.retryable);
          return result_of(a.tokens);
        },
        [&](std::uint32_t id) { out.handed.push_back(id); });
    out.attempts = r.attempts;
  } catch (const serve::RequestError& e) {
    out.error = e.what();
    out.error_retryable = e.retryable();
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

TEST_CASE("refusals that ask to come back later are retryable; the others are not") {
  CHECK(serve::retryable_refusal("busy: 8 sessions running and 16 queued; try again later"));
  CHECK(serve::retryable_refusal("shutting down: the service is draining; retry once it is back"));
  CHECK_FALSE(serve::retryable_refusal("bad request: 9 new tokens (this service allows at most 8)"));
  CHECK_FALSE(serve::retryable_refusal("malformed request: protocol error: truncated"));
  CHECK_FALSE(serve::retryable_refusal("the request client x sent server 1 differs from the one server 0 admitted"));
}

TEST_CASE("a link that failed or went silent is retryable; this client's own stop or a bad reply is not") {
  CHECK(serve::retryable_link_error(Error(ErrorCode::network, "party 2: connection closed by the peer")));
  CHECK(serve::retryable_link_error(Error(ErrorCode::timeout, "server 1 silent for 20000 ms")));
  CHECK_FALSE(serve::retryable_link_error(Error(ErrorCode::cancelled, "stopped by the caller")));
  CHECK_FALSE(serve::retryable_link_error(Error(ErrorCode::protocol, "malformed reply")));
  // connect_to_server: a server that does not know this client's key.
  CHECK_FALSE(serve::retryable_link_error(Error(ErrorCode::invalid_argument, "server 0 refused this client")));
}

TEST_CASE("the service's refusals and failures say whether a retry may help") {
  serve::ServeOptions options;
  options.max_sessions = 1;
  options.max_queued = 0;
  options.max_new_tokens = 8;
  Service service(options);
  Failure busy, bad, garbage;
  Outcome fine;
  auto garbage_request = request_for(emma, 2);
  garbage_request.fault = serve::ClientRequest::Fault::garbage_share;
  std::vector<Task<void>> clients;
  clients.push_back(ask(service.connect("fine"), request_for(emma, 2), fine));
  clients.push_back(ask_for_failure(service.connect("second"), request_for(emma, 2), busy));
  clients.push_back(ask_for_failure(service.connect("greedy"), request_for(emma, 9), bad));
  service.run(std::move(clients));
  CHECK(fine.tokens == generated(bytes_of(emma), 2));
  REQUIRE(busy.thrown);
  CHECK(busy.what.find("refused the request: busy") != std::string::npos);
  CHECK(busy.retryable);
  REQUIRE(bad.thrown);
  CHECK(bad.what.find("bad request") != std::string::npos);
  CHECK_FALSE(bad.retryable);

  // A session failed by a client that misbehaved on purpose is not retried.
  Service again(options);
  std::vector<Task<void>> more;
  more.push_back(ask_for_failure(again.connect("garbage"), garbage_request, garbage));
  again.run(std::move(more));
  REQUIRE(garbage.thrown);
  CHECK_FALSE(garbage.retryable);
}

TEST_CASE("a retry after streamed tokens hands over only the new ones, and says so") {
  const auto r = run_fake({{{5, 6}, "party 2: connection closed"}, {{5, 6, 7, 8}, ""}}, 3);
  CHECK(r.error.empty());
  CHECK(r.attempts == 2);
  CHECK(r.handed == std::vector<std::uint32_t>{5, 6, 7, 8});
  REQUIRE(r.notes.size() == 1);
  CHECK(r.notes[0].find("attempt 1 of 4 failed") != std::string::npos);
  CHECK(r.notes[0].find("2 tokens were already streamed") != std::string::npos);
}

TEST_CASE("a retry before any token says nothing of streamed tokens") {
  const auto r = run_fake({{{}, "cannot connect to server 2"}, {{}, "server 0 refused the request: busy"}, {{1, 2}, ""}}, 5);
  CHECK(r.error.empty());
  CHECK(r.attempts == 3);
  CHECK(r.handed == std::vector<std::uint32_t>{1, 2});
  REQUIRE(r.notes.size() == 2);
  CHECK(r.notes[1].find("already streamed") == std::string::npos);
}

TEST_CASE("a retry that would contradict the tokens streamed fails, not retried again") {
  const auto r = run_fake({{{5, 6}, "lost"}, {{5, 9, 7}, ""}}, 5);
  CHECK(r.handed == std::vector<std::uint32_t>{5, 6});
  CHECK(r.error.find("chose token 9 at position 1, where an earlier attempt streamed 6") != std::string::npos);
  CHECK_FALSE(r.error_retryable);
}

TEST_CASE("a failure that is not retryable, or the last retry's, ends the request") {
  const auto once = run_fake({{{}, "bad request", false}}, 5);
  CHECK(once.notes.empty());
  CHECK(once.error.find("bad request") != std::string::npos);
  CHECK(once.error.find("attempts") == std::string::npos);

  const auto out = run_fake({{{}, "lost"}, {{}, "lost"}, {{}, "lost again"}}, 2);
  CHECK(out.notes.size() == 2);
  CHECK(out.error.find("lost again (3 attempts)") != std::string::npos);
}

TEST_CASE("a stop ends the wait between attempts") {
  std::stop_source stop;
  stop.request_stop();
  const auto r = run_fake({{{}, "lost"}, {{1}, ""}}, 5, stop.get_token());
  CHECK(r.error.find("stopped while it waited to retry") != std::string::npos);
  CHECK(r.handed.empty());
}
