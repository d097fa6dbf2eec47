module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.model;

namespace mpcache::serve {

namespace {
constexpr PartyId self = 3;

std::string server_name(PartyId i) { return "server " + std::to_string(i); }

// Takes the heartbeats `server` sent so far (Server sends one per
// heartbeat_every to keep this client's silence deadline from running out
// while it waits): only their arrival matters, and taken they do not pile up
// over a long request. Never waits. A failed link is left for the next
// receive to report, after the replies that came before the failure.
void drop_heartbeats(Endpoint& endpoint, PartyId server) {
  try {
    for (;;) {
      auto beat = endpoint.recv_idle(server, heartbeat_stream);
      if (!beat.await_ready()) return;  // takes a frame that is there, else registers nothing
    }
  } catch (const Error&) {
  }
}

// A failure of the link itself (the server gone, silent past the deadline)
// becomes a RequestError; a malformed reply is the server's, not retryable.
Task<Reply> next_reply(Endpoint& endpoint, PartyId server, bool may_retry) {
  drop_heartbeats(endpoint, server);
  std::vector<std::byte> bytes;
  try {
    bytes = co_await endpoint.recv(server, reply_stream);
  } catch (const Error& e) {
    throw RequestError(e.code(), reason_of(e), may_retry && retryable_link_error(e));
  }
  co_return Reply::decode(bytes, server_name(server));
}

// A refusal is retryable when it says to come back later; a session the
// server accepted and then failed is the service's failure, not the
// request's, unless the client misbehaved on purpose (a test's fault).
[[noreturn]] void refused_by(PartyId server, const Reply& r, bool may_retry) {
  const bool refused = r.kind == ReplyKind::refused;
  throw RequestError(refused ? ErrorCode::invalid_argument : ErrorCode::protocol,
                     server_name(server) + (refused ? " refused the request: " : " failed the session: ") + r.text(),
                     may_retry && (!refused || retryable_refusal(r.text())));
}

// temperature x Gumbel(0, 1), one row per token, in fixed point: the token
// argmax(logits + row) is a sample of softmax(logits / temperature).
// Uniforms in (0, 1) from `seed` (splitmix64: the same noise for the same
// seed on every platform, which a std:: distribution does not promise).
RingTensor gumbel_noise(double temperature, std::uint64_t seed, std::size_t tokens, std::size_t vocab) {
  std::uint64_t state = seed;
  auto uniform = [&state] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) * 0x1.0p-53;
  };
  const FixedPoint fp;
  RingTensor noise = ring_zeros({tokens, vocab});
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t v = 0; v < vocab; ++v) noise(t, v) = fp.encode(-temperature * std::log(-std::log(uniform())));
  return noise;
}

Nonce fresh_nonce() {
  const PrgKey k = random_prg_key();
  Nonce n{};
  std::memcpy(n.data(), k.data(), sizeof n);
  return n;
}
}  // namespace

std::string reason_of(const Error& e) {
  const std::string what = e.what(), prefix = std::string(to_string(e.code())) + ": ";
  return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
}

bool retryable_refusal(std::string_view why) { return why.starts_with("busy") || why.starts_with("shutting down"); }

bool retryable_link_error(const Error& error) {
  return error.code() == ErrorCode::network || error.code() == ErrorCode::timeout;
}

Task<ClientResult> request(Endpoint& endpoint, const ClientRequest& req, std::function<void(std::uint32_t)> on_token) {
  if (endpoint.parties() != 4 || endpoint.id() != self)
    throw Error(ErrorCode::invalid_argument, "serve::request: the client is party 3 of 4 (servers 0..2)");
  if (req.prompt.empty()) throw Error(ErrorCode::invalid_argument, "serve::request: an empty prompt");
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ServeRequest q;
  q.nonce = fresh_nonce();
  q.prompt_length = req.prompt.size();
  q.new_tokens = req.new_tokens;
  q.budget = req.budget;
  q.policy = req.policy;
  q.stop_tokens = req.stop_tokens;
  if (!std::isfinite(req.temperature) || req.temperature < 0 || req.temperature > 100)
    throw Error(ErrorCode::invalid_argument, "serve::request: temperature " + std::to_string(req.temperature) +
                                                 " is not in 0..100");
  q.sampled = req.temperature > 0;
  if (req.speculate > max_speculated_tokens)
    throw Error(ErrorCode::invalid_argument, "serve::request: speculate " + std::to_string(req.speculate) +
                                                 " tokens a step, outside 0.." + std::to_string(max_speculated_tokens));
  if (req.speculate > 0 && q.sampled)
    throw Error(ErrorCode::invalid_argument,
                "serve::request: speculation verifies greedy choices; it cannot sample (temperature > 0)");
  q.speculate = req.speculate;
  const Drafter draft = req.speculate == 0 ? Drafter{} : req.draft ? req.draft : lookup_drafter();
  const bool may_retry = req.fault == ClientRequest::Fault::none;
  const auto header = q.encode();
  for (PartyId s = 0; s < 3; ++s) endpoint.send(s, request_stream, header);

  ClientResult result;
  std::uint64_t vocab = 0;
  for (PartyId s = 0; s < 3; ++s) {
    const Reply r = co_await next_reply(endpoint, s, may_retry);
    if (r.kind != ReplyKind::accepted) refused_by(s, r, may_retry);
    if (r.body.size() != 16) throw Error(ErrorCode::protocol, server_name(s) + " sent a malformed acceptance");
    std::uint64_t words[2];
    std::memcpy(words, r.body.data(), sizeof words);
    if (s == 0) {
      result.session = words[0];
      vocab = words[1];
    } else if (words[0] != result.session || words[1] != vocab) {
      throw Error(ErrorCode::protocol, "the servers disagree on the session (" + std::to_string(result.session) + " vs " +
                                           std::to_string(words[0]) + ") or the vocabulary (" + std::to_string(vocab) +
                                           " vs " + std::to_string(words[1]) + ")");
    }
  }
  result.seconds_to_accept = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto t : req.prompt)
    if (t >= vocab)
      throw Error(ErrorCode::invalid_argument, "prompt token " + std::to_string(t) + " is outside the model's vocabulary of " +
                                                   std::to_string(vocab));
  auto one_hot_rows = [vocab](std::span<const std::uint32_t> tokens) {
    RingTensor hot = ring_zeros({tokens.size(), vocab});
    for (std::size_t i = 0; i < tokens.size(); ++i) hot(i, tokens[i]) = 1;
    return hot;
  };
  auto parts = client_shares::split(one_hot_rows(req.prompt));
  if (req.fault == ClientRequest::Fault::garbage_share) parts[1].resize(parts[1].size() / 2);
  if (req.fault != ClientRequest::Fault::stall)
    for (PartyId s = 0; s < 3; ++s) endpoint.send(s, prompt_stream, parts[s]);
  if (q.sampled && req.fault != ClientRequest::Fault::stall) {
    const auto noise = client_shares::split(gumbel_noise(req.temperature, req.seed, req.new_tokens, vocab));
    for (PartyId s = 0; s < 3; ++s) endpoint.send(s, noise_stream, noise[s]);
  }

  // Speculating: what the drafter sees (the prompt and every token chosen),
  // and the tokens the servers chose, also those past a stop token.
  std::vector<std::uint32_t> context;
  if (draft) context = req.prompt;
  std::size_t chosen = 0;
  bool stop_seen = false;  // speculating: a stop token came, the rest of its step is not streamed
  bool told_end = false;   // and the servers were told that generation ended
  auto last = Clock::now();
  for (;;) {
    std::array<std::vector<std::byte>, 3> token_parts;
    std::optional<std::uint64_t> done;
    std::optional<ReplyKind> kind;
    std::uint64_t count = 1;
    for (PartyId s = 0; s < 3; ++s) {
      Reply r = co_await next_reply(endpoint, s, may_retry);
      if (r.kind == ReplyKind::token || r.kind == ReplyKind::verified || r.kind == ReplyKind::done) {
        if (kind && *kind != r.kind)
          throw Error(ErrorCode::protocol, "the servers disagree on whether generation ended or how a step was chosen");
        kind = r.kind;
      }
      if (r.kind == ReplyKind::token) {
        token_parts[s] = r.body;
      } else if (r.kind == ReplyKind::verified) {
        ByteReader reader(std::span<const std::byte>(r.body).first(std::min<std::size_t>(8, r.body.size())),
                          server_name(s) + "'s verified step");
        const std::uint64_t n = reader.u64();
        if (n == 0 || n > req.speculate + 1 || (s > 0 && n != count))
          throw Error(ErrorCode::protocol, server_name(s) + " sent a verified step of " + std::to_string(n) + " tokens" +
                                               (s > 0 ? " where server 0 sent " + std::to_string(count) : ""));
        count = n;
        token_parts[s].assign(r.body.begin() + 8, r.body.end());
      } else if (r.kind == ReplyKind::done) {
        done = r.number();
      } else {
        refused_by(s, r, may_retry);
      }
    }
    if (done) {
      if (*done != chosen)
        throw Error(ErrorCode::protocol, "the servers report " + std::to_string(*done) + " tokens, the client got " +
                                             std::to_string(chosen));
      break;
    }
    if (told_end) throw Error(ErrorCode::protocol, "the servers went on after the client ended the generation");
    const RingTensor tokens = client_shares::reconstruct(token_parts, {count, 1});
    if (chosen + count > req.new_tokens)
      throw Error(ErrorCode::protocol, "the servers chose " + std::to_string(chosen + count) + " tokens of " +
                                           std::to_string(req.new_tokens));
    if (*kind == ReplyKind::verified) result.accepted.push_back(count - 1);
    const auto now = Clock::now();
    const double each = std::chrono::duration<double>(now - last).count() / static_cast<double>(count);
    last = now;
    for (std::size_t i = 0; i < count; ++i) {
      if (tokens(i, 0) >= vocab)
        throw Error(ErrorCode::protocol, "the servers opened token " + std::to_string(tokens(i, 0)) +
                                             ", outside the vocabulary");
      const auto id = static_cast<std::uint32_t>(tokens(i, 0));
      ++chosen;
      if (draft) context.push_back(id);
      if (stop_seen) continue;  // past a stop token within a verified step: not part of the text
      if (result.tokens.empty())
        result.seconds_to_first_token = std::chrono::duration<double>(now - t0).count();
      else
        result.token_seconds.push_back(each);
      result.tokens.push_back(id);
      if (on_token) on_token(id);
      if (req.fault == ClientRequest::Fault::vanish)
        throw Error(ErrorCode::cancelled, "the client left after its first token (a test's fault)");
      if (std::find(req.stop_tokens.begin(), req.stop_tokens.end(), id) != req.stop_tokens.end()) {
        result.end = ClientEnd::eos;
        stop_seen = draft != nullptr;
      }
    }
    if (!draft) continue;
    // The next step's rows: the last token and the drafts the budget leaves room for.
    if (stop_seen) {  // the servers answer with done
      for (PartyId s = 0; s < 3; ++s) endpoint.send(s, drafts_stream, std::vector<std::byte>{});
      told_end = true;
      continue;
    }
    if (chosen >= req.new_tokens) continue;
    const std::size_t k = std::min<std::size_t>(req.speculate, req.new_tokens - chosen - 1);
    std::vector<std::uint32_t> rows = draft(context, k);
    if (rows.size() != k)
      throw Error(ErrorCode::invalid_argument, "serve::request: the drafter gave " + std::to_string(rows.size()) +
                                                   " tokens for " + std::to_string(k));
    for (auto t : rows)
      if (t >= vocab)
        throw Error(ErrorCode::invalid_argument, "serve::request: the drafter proposed token " + std::to_string(t) +
                                                     ", outside the vocabulary of " + std::to_string(vocab));
    rows.insert(rows.begin(), context.back());
    auto step_parts = client_shares::split(one_hot_rows(rows));
    const bool first = result.accepted.empty();
    if (first && req.fault == ClientRequest::Fault::garbage_drafts) step_parts[1].resize(step_parts[1].size() / 2);
    if (!(first && req.fault == ClientRequest::Fault::stall_drafts))
      for (PartyId s = 0; s < 3; ++s) endpoint.send(s, drafts_stream, step_parts[s]);
  }
  co_return result;
}

ClientResult run_client(const ClientOptions& options, const ClientRequest& req, std::function<void(std::uint32_t)> on_token) {
  return with_retries(options.retry, options.stop,
                      [&](const std::function<void(std::uint32_t)>& sink) { return run_client_once(options, req, sink); },
                      on_token);
}

ClientResult run_client_once(const ClientOptions& options, const ClientRequest& req,
                             const std::function<void(std::uint32_t)>& on_token) {
  Connections c;
  c.fds.assign(4, -1);
  c.keys.assign(4, std::nullopt);
  c.names.assign(4, "this client");
  try {
    for (PartyId s = 0; s < 3; ++s) {
      const auto& e = options.servers[s];
      auto channel = connect_to_server(e.host, e.client_port, s, options.secret_key_pem, options.public_key_pem,
                                       e.public_key_pem, options.connect_timeout);
      c.fds[s] = channel.fd;
      c.keys[s] = channel.keys;
      c.names[s] = server_name(s) + " (" + channel.remote + ")";
    }
  } catch (const Error& e) {
    for (int fd : c.fds)
      if (fd >= 0) close_descriptor(fd);
    // Unreachable or at its door's limit: perhaps back soon. A server that
    // does not know this client's key (invalid_argument) will not be.
    throw RequestError(e.code(), reason_of(e), retryable_link_error(e));
  } catch (...) {
    for (int fd : c.fds)
      if (fd >= 0) close_descriptor(fd);
    throw;
  }
  Scheduler scheduler;
  Endpoint endpoint(scheduler, self, 4);
  TcpTransport transport(scheduler, endpoint, std::move(c), options.tcp);
  std::optional<LinkEmulator> emulated;
  if (options.link.rtt_s > 0 || options.link.bytes_per_s > 0) {
    Link both_ways = options.link;
    both_ways.rtt_s *= 2;  // the emulator holds a batch for half a round trip
    emulated.emplace(transport, transport.timers(), both_ways);
    endpoint.attach(&*emulated);
  }
  endpoint.cancel_when(options.stop);
  return sync_wait(scheduler, request(endpoint, req, on_token));
}

}  // namespace mpcache::serve
