// A service's client: connects to the three servers (pinning their keys),
// gives its prompt as secret shares, and reconstructs each chosen token from
// the three servers' parts, checking that they agree. No single server
// learns the prompt or a token. Tokens stream to `on_token` as they come.
export module mpcache.serve:client;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
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
  // Tests of the servers' fault isolation only: misbehave on purpose.
  // garbage_share: server 1's prompt share is cut short; vanish: the client
  // leaves once it has its first token (request() throws Error(cancelled));
  // stall: it never sends its prompt, yet stays to read the replies.
  enum class Fault { none, garbage_share, vanish, stall } fault = Fault::none;
};

enum class ClientEnd { budget, eos };

struct ClientResult {
  std::vector<std::uint32_t> tokens;
  ClientEnd end = ClientEnd::budget;
  std::uint64_t session = 0;
  double seconds_to_accept = 0;        // request sent -> every server accepted (includes queueing)
  double seconds_to_first_token = 0;   // request sent -> first token
  std::vector<double> token_seconds;   // each token after the first: time since the one before
};

// One request over `endpoint`: four parties, this client is party 3 and the
// servers 0..2. Refusals and failures throw Error naming the server and why.
Task<ClientResult> request(Endpoint& endpoint, const ClientRequest& request,
                           std::function<void(std::uint32_t)> on_token = {});

struct ServerEntry {
  std::string host;
  std::uint16_t client_port = 0;
  std::string public_key_pem;
};

struct ClientOptions {
  std::array<ServerEntry, 3> servers;
  std::string secret_key_pem, public_key_pem;  // this client's Ed25519 pair
  std::chrono::milliseconds connect_timeout{10000};
  TcpOptions tcp;  // silence deadline: how long a server may stay silent (servers beat each heartbeat_every)
  // A stop requested here (from any thread) ends the request: run_client
  // throws Error(cancelled) and every server ends the session (Endpoint::cancel_when).
  std::stop_token stop;
};

// Connects, runs one request on a loop of its own, disconnects.
ClientResult run_client(const ClientOptions& options, const ClientRequest& request,
                        std::function<void(std::uint32_t)> on_token = {});

}  // namespace mpcache::serve
