// Admission (modules/serve/server_parts.cppm): a client's request, from its
// connection to its session's launch or its refusal. Server 0 decides (a
// session number, the queue, or a refusal) and announces it; servers 1 and 2
// launch a session only when the leader's word and the client's own request
// to them agree, since a client could tell each server something else.
module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.kv;
import mpcache.model;

namespace mpcache::serve {

void Admission::welcome(std::shared_ptr<ClientLink> link) {
  liveness_.keep(link);
  if (s_.stopping) {
    const std::string why = shutting_down;
    ++s_.stats.refused;
    s_.log("refused " + link->name + ": " + why);
    link->reply(Reply::text(ReplyKind::refused, why));
    link->close();
    return;
  }
  s_.log("client " + link->name + " connected");
  s_.tasks.spawn(read_request(std::move(link)));
}

std::string request_problem(const ServeOptions& options, const ModelConfig& config, const ServeRequest& q) {
  if (q.prompt_length == 0) return "an empty prompt";
  if (q.new_tokens == 0) return "zero new tokens";
  if (q.new_tokens > options.max_new_tokens)
    return std::to_string(q.new_tokens) + " new tokens (this service allows at most " +
           std::to_string(options.max_new_tokens) + ")";
  // Each bound alone first: their sum could wrap.
  if (q.prompt_length > config.max_positions || q.new_tokens > config.max_positions - q.prompt_length)
    return "prompt (" + std::to_string(q.prompt_length) + ") + new tokens (" + std::to_string(q.new_tokens) +
           ") exceed the model's " + std::to_string(config.max_positions) + " positions";
  for (auto t : q.stop_tokens)
    if (t >= config.vocab_size)
      return "stop token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(config.vocab_size);
  if (q.speculate > max_speculated_tokens)
    return "speculation of " + std::to_string(q.speculate) + " tokens a step, outside 0.." +
           std::to_string(max_speculated_tokens);
  if (q.speculate > 0 && q.sampled)
    return "speculation verifies greedy choices; it cannot sample (temperature > 0)";
  if (q.speculate > 0 && options.max_batch < 2)
    return "speculation runs in the batched steps, and this service does not batch (max batch " +
           std::to_string(options.max_batch) + ")";
  try {
    const auto policy = kv::make_policy<Rss3>(q.policy, q.budget == 0 ? kv::default_budget(q.policy) : q.budget);
    if (q.speculate > 0) check_speculative_policy<kv::AnyPolicy<Rss3>, Rss3>(policy);
  } catch (const Error& e) {
    return e.what();
  }
  if (session_memory_bytes(config, q) > options.kv_bytes_limit)
    return std::string(q.speculate > 0 ? "its KV cache, with a copy per draft for each step's rows, ("
                       : q.sampled   ? "its KV cache and sampling noise ("
                                     : "its KV cache (") +
           std::to_string(session_memory_bytes(config, q)) + " bytes) exceeds this service's limit of " +
           std::to_string(options.kv_bytes_limit);
  return {};
}

void Admission::refuse(Request& r, const std::string& why) {
  ++s_.stats.refused;
  s_.log("refused " + r.link->name + ": " + why);
  r.link->reply(Reply::text(ReplyKind::refused, why));
  r.link->close();
}

// Leader: refuses here and tells the others why.
void Admission::refuse_everywhere(Request& r, const std::string& why) {
  Announcement a;
  a.nonce = r.request.nonce;
  a.why = why;
  for (PartyId peer = 1; peer < 3; ++peer) s_.mesh.send(peer, announce_stream, a.encode());
  refuse(r, why);
}

void Admission::refuse_waiting(const std::string& why) {
  for (auto& r : queue_) refuse_everywhere(*r, why);
  queue_.clear();
  for (auto& [nonce, r] : waiting_for_leader_) refuse(*r, why);
  waiting_for_leader_.clear();
}

bool Admission::has_room(const ServeRequest& q) const {
  return sessions_.active() < s_.options.max_sessions &&
         sessions_.kv_in_use() + session_memory_bytes(s_.config, q) <= s_.options.kv_bytes_limit;
}

void Admission::consider(const std::shared_ptr<Request>& r) {  // leader
  if (const std::string why = request_problem(s_.options, s_.config, r->request); !why.empty())
    return refuse_everywhere(*r, "bad request: " + why);
  // Nobody overtakes the queue: a small request does not starve a big one.
  if (has_room(r->request) && queue_.empty()) return start_as_leader(r);
  if (queue_.size() >= s_.options.max_queued)
    return refuse_everywhere(*r, "busy: " + std::to_string(sessions_.active()) + " sessions running and " +
                                     std::to_string(queue_.size()) + " queued; try again later");
  s_.log("queued " + r->link->name + " (" + std::to_string(queue_.size() + 1) + " waiting)");
  queue_.push_back(r);
}

void Admission::start_queued() {  // leader
  while (!queue_.empty() && !s_.stopping && has_room(queue_.front()->request)) {
    auto r = queue_.front();
    queue_.pop_front();
    if (r->link->closed) continue;
    start_as_leader(r);
  }
}

void Admission::start_as_leader(const std::shared_ptr<Request>& r) {
  Announcement a;
  a.admitted = true;
  a.session = next_session_++;
  a.nonce = r->request.nonce;
  a.request = r->bytes;
  for (PartyId peer = 1; peer < 3; ++peer) s_.mesh.send(peer, announce_stream, a.encode());
  liveness_.admitted(a.session);
  sessions_.launch(a.session, r);
}

// Others: the leader's word and the client's request, whichever came second.
void Admission::match(const Announcement& a, const std::shared_ptr<Request>& r) {
  if (!a.admitted) return refuse(*r, a.why);
  if (a.request != r->bytes) {
    const std::string why = "the request " + r->link->name + " sent server " + std::to_string(s_.id()) +
                            " differs from the one server 0 admitted";
    s_.mesh.cancel_scope(scope_of(a.session), "session " + std::to_string(a.session) + ": " + why);
    liveness_.session_ended(a.session);  // never launched here
    return refuse(*r, why);
  }
  sessions_.launch(a.session, r);
}

Task<void> Admission::read_request(std::shared_ptr<ClientLink> link) {
  std::shared_ptr<Request> r;
  try {
    auto bytes = co_await link->endpoint->recv(link->client_peer, request_stream);
    r = make_shared<Request>(Request{link, ServeRequest::decode(bytes), std::move(bytes)});
  } catch (const Error& e) {
    s_.log("dropped " + link->name + ": " + e.what());
    link->reply(Reply::text(ReplyKind::refused, std::string("malformed request: ") + e.what()));
    link->close();
    co_return;
  }
  // A client that came while the model was being shared waits for it.
  while (!s_.is_ready && !s_.stopping) co_await s_.changed.wait();
  if (s_.id() == leader && (s_.stopping || link->closed)) co_return refuse_everywhere(*r, shutting_down);
  if (s_.stopping || link->closed) co_return refuse(*r, shutting_down);
  if (s_.id() == leader) co_return consider(r);
  const Nonce nonce = r->request.nonce;
  if (auto it = waiting_for_client_.find(nonce); it != waiting_for_client_.end()) {
    const Announcement a = std::move(it->second);
    waiting_for_client_.erase(it);
    co_return match(a, r);
  }
  waiting_for_leader_[nonce] = r;
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(SteadyClock::now() + s_.options.match_within, [this, guard, nonce] {
    if (guard.expired()) return;
    auto it = waiting_for_leader_.find(nonce);
    if (it == waiting_for_leader_.end()) return;
    auto late = it->second;
    waiting_for_leader_.erase(it);
    refuse(*late, "server 0 did not admit this request within " + std::to_string(s_.options.match_within.count()) +
                      " ms (did the client reach it?)");
  });
}

Task<void> Admission::hear_announcements() {  // servers 1 and 2
  for (;;) {
    std::vector<std::byte> bytes;
    try {
      bytes = co_await s_.mesh.recv_idle(leader, announce_stream);
    } catch (const Error&) {
      co_return;  // the mesh is gone or cancelled: run() reports it
    }
    const Announcement a = Announcement::decode(bytes);
    if (auto it = waiting_for_leader_.find(a.nonce); it != waiting_for_leader_.end()) {
      auto r = it->second;
      waiting_for_leader_.erase(it);
      match(a, r);
      continue;
    }
    if (s_.stopping && a.admitted) {  // after the drain: cannot happen while the leader keeps its word
      s_.mesh.cancel_scope(scope_of(a.session), "session " + std::to_string(a.session) + ": server " +
                                                    std::to_string(s_.id()) + " is shutting down");
      liveness_.session_ended(a.session);
      continue;
    }
    waiting_for_client_[a.nonce] = a;
    std::weak_ptr<bool> guard = s_.alive;
    s_.timers.at(SteadyClock::now() + s_.options.match_within, [this, guard, a] {
      if (guard.expired()) return;
      auto it = waiting_for_client_.find(a.nonce);
      if (it == waiting_for_client_.end()) return;
      waiting_for_client_.erase(it);
      if (!a.admitted) return;
      s_.mesh.cancel_scope(scope_of(a.session), "session " + std::to_string(a.session) +
                                                    ": its request never reached server " + std::to_string(s_.id()));
      liveness_.session_ended(a.session);
    });
  }
}

}  // namespace mpcache::serve
