// A service's client: connects to the three servers (pinning their keys),
// gives its prompt as secret shares, and reconstructs each chosen token from
// the three servers' parts, checking that they agree. No single server
// learns the prompt or a token. Tokens stream to `on_token` as they come.
export module mpcache.serve:client;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.model;
import :messages;

export namespace mpcache::serve {

struct ClientRequest {
  std::vector<std::uint32_t> prompt;  // token ids
  std::size_t new_tokens = 16;
  std::string policy = "mpcache";
  std::size_t budget = 0;                  // 0: the policy's default
  std::vector<std::uint32_t> stop_tokens;  // e.g. the tokenizer's EOS
  // > 0: sample by the Gumbel-max trick. The client draws temperature x
  // Gumbel(0, 1) noise for every token and vocabulary entry from `seed`
  // and secret-shares it (ServeRequest::sampled); 0: greedy.
  double temperature = 0;
  std::uint64_t seed = 0;
  // Speculative decoding (greedy only): each decode step verifies up to
  // `speculate` (0..max_speculated_tokens) tokens that `draft` proposes
  // here, in the clear (empty: lookup_drafter()). The client sends each
  // step's rows and so is on each step's critical path; the text is the
  // same, and the servers learn how many each step accepted.
  std::size_t speculate = 0;
  Drafter draft = {};
  // Tests of the servers' fault isolation only: misbehave on purpose.
  // garbage_share: server 1's prompt share is cut short; vanish: the client
  // leaves once it has its first token (request() throws Error(cancelled));
  // stall: it never sends its prompt, yet stays to read the replies;
  // garbage_drafts (speculating): server 1's part of the first step's rows
  // is cut short; stall_drafts: it never sends the first step's rows.
  enum class Fault { none, garbage_share, vanish, stall, garbage_drafts, stall_drafts } fault = Fault::none;
};

enum class ClientEnd { budget, eos };

struct ClientResult {
  std::vector<std::uint32_t> tokens;
  std::size_t attempts = 1;  // requests sent (ClientOptions::retry): 1 + the retries it took
  ClientEnd end = ClientEnd::budget;
  std::uint64_t session = 0;
  double seconds_to_accept = 0;        // request sent -> every server accepted (includes queueing)
  double seconds_to_first_token = 0;   // request sent -> first token
  std::vector<double> token_seconds;   // each token after the first: time since the one before (the
                                       // tokens of one speculative step share its time evenly)
  std::vector<std::size_t> accepted;   // speculating: the drafts each decode step accepted
};

// How a request failed, as a retry sees it: `retryable` when the service,
// not the request, was at fault (a server lost or unreachable, the service
// shutting down or busy, a session it accepted and then failed), so that
// the same request may be sent again once the service is back.
class RequestError : public Error {
 public:
  RequestError(ErrorCode code, const std::string& what, bool retryable) : Error(code, what), retryable_(retryable) {}
  bool retryable() const noexcept { return retryable_; }

 private:
  bool retryable_;
};

// Whether a server's refusal (its text) asks the client to come back later:
// "busy: ..." (its queue is full) or "shutting down: ..." (a drain). Every
// other refusal (a bad request, a request the servers saw differently)
// would be refused again.
bool retryable_refusal(std::string_view why);
// Whether an error of a client's link to a server (connecting, or a wait
// on a reply) means the server is lost or unreachable for now: network
// errors and timeouts, not this client's own cancellation.
bool retryable_link_error(const Error& error);

// One request over `endpoint`: four parties, this client is party 3 and the
// servers 0..2. Refusals and failures throw RequestError naming the server
// and why.
Task<ClientResult> request(Endpoint& endpoint, const ClientRequest& request,
                           std::function<void(std::uint32_t)> on_token = {});

struct ServerEntry {
  std::string host;
  std::uint16_t client_port = 0;
  std::string public_key_pem;
};

// Retries of a request that failed retryably (RequestError::retryable).
// A retry sends the whole request again (the prompt is still here), after
// `wait`. Tokens the failed attempt already streamed are not streamed
// again: the retry's first tokens are checked against them (greedy and
// seeded sampling choose the same ones) and only the rest go to on_token;
// `on_retry` is told of every retry, and of the tokens it will not repeat.
struct RetryOptions {
  std::size_t retries = 0;  // 0: fail at the first error
  std::chrono::milliseconds wait{1000};
  std::function<void(const std::string&)> on_retry;
};

struct ClientOptions {
  std::array<ServerEntry, 3> servers;
  std::string secret_key_pem, public_key_pem;  // this client's Ed25519 pair
  std::chrono::milliseconds connect_timeout{10000};
  TcpOptions tcp;  // silence deadline: how long a server may stay silent (servers beat each heartbeat_every)
  // A stop requested here (from any thread) ends the request: run_client
  // throws Error(cancelled) and every server ends the session (Endpoint::cancel_when).
  std::stop_token stop;
  RetryOptions retry;
  // Benches: emulate this client's own network link (none: its real one).
  // What it sends is held for the link's whole round trip and bandwidth,
  // the servers' replies are not held: a client on each step's critical
  // path (speculating) waits one round trip per step, as over a real link.
  Link link;
};

// Connects, runs one request on a loop of its own, disconnects; again per
// options.retry while it fails retryably. A request that fails for good,
// or whose retries run out, throws the last attempt's RequestError.
ClientResult run_client(const ClientOptions& options, const ClientRequest& request,
                        std::function<void(std::uint32_t)> on_token = {});

// The retry loop of run_client, around any `attempt` (tests give their own):
// `attempt(sink)` runs one request, streaming its tokens to `sink`. A stop
// on `stop` ends a wait between attempts (Error(cancelled)).
ClientResult with_retries(const RetryOptions& retry, std::stop_token stop,
                          const std::function<ClientResult(const std::function<void(std::uint32_t)>&)>& attempt,
                          const std::function<void(std::uint32_t)>& on_token);

}  // namespace mpcache::serve

namespace mpcache::serve {
// An Error's text without the "<code>: " its constructor put first, to
// throw it again as another Error (src/serve/client.cpp).
std::string reason_of(const Error& error);
// One attempt of run_client (src/serve/client.cpp); the module's own.
ClientResult run_client_once(const ClientOptions& options, const ClientRequest& request,
                             const std::function<void(std::uint32_t)>& on_token);
}  // namespace mpcache::serve
