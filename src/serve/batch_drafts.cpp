// Batcher (modules/serve/server_parts.cppm), speculating sessions: each
// decode step of one takes K'+1 rows from its client (the last token, then
// K' drafts, secret-shared on drafts_stream), verified in the batched step
// beside the other sessions' rows, as verify_drafts (:speculate) does for
// generate. The leader plans such a session once its rows came at all three
// servers (BatchPlanner::speculating: its readiness is used up by each
// step). A client that sends malformed rows, none in time, or rows to some
// servers and an end to others ends its own session only.
module mpcache.serve;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import mpcache.model;

namespace mpcache::serve {

// At this server, while the session decodes: once its last step has ended
// here, its client's rows for the next one (within prompt_within), or an
// empty frame that ends the generation (the client saw a stop token).
Task<void> Batcher::receive_drafts(std::shared_ptr<Sequence> seq) {
  const std::uint64_t session = seq->session;
  const std::shared_ptr<ClientLink> link = seq->request->link;
  bool client_ended = false;
  for (;;) {
    while (!seq->ended && (seq->drafted || planner_.stepping(session))) co_await s_.changed.wait();
    if (seq->ended) co_return;
    // After an end nothing more may come: the leader's departure ends the
    // session (if the leader got rows instead, its check below fails it).
    auto came = make_shared<bool>(client_ended);
    if (!client_ended) liveness_.fail_unless_by(link, came, s_.options.prompt_within, "sent no drafted rows");
    std::vector<std::byte> part;
    try {
      part = co_await link->endpoint->recv(link->client_peer, drafts_stream);
    } catch (const Error& e) {
      if (!seq->ended) drafts_failed(session, reason_of(e));
      co_return;
    }
    if (seq->ended) co_return;
    if (client_ended) {
      *came = true;
      co_return drafts_failed(session, "the client sent drafted rows after it ended its generation");
    }
    if (part.empty()) {  // the end: the leader's departure ends the session at all three
      *came = true;
      client_ended = true;
      if (s_.id() == leader) {
        planner_.depart(session, "");
        s_.changed.notify();
      }
      continue;
    }
    const std::size_t rows = seq->drafts_due() + 1;
    try {
      seq->drafted = client_shares::assemble(s_.id(), part, {rows, s_.config.vocab_size});
    } catch (const Error& e) {
      *came = true;
      co_return drafts_failed(session, "the client sent malformed drafted rows (" + std::to_string(rows) +
                                           " one-hot rows expected): " + reason_of(e));
    }
    *came = true;
    drafts_came(session);
  }
}

// Ready here for its next step. The leader also checks that the rows
// reach servers 1 and 2 in time: their steps end about when its own does,
// so a client that sent them its rows late, or an end instead, is at fault.
void Batcher::drafts_came(std::uint64_t session) {
  s_.changed.notify();
  if (s_.id() != leader) return s_.mesh.send(leader, batch_ready_stream, BatchReady{session, true, {}}.encode());
  planner_.joined(session, leader);
  auto it = decoding_.find(session);
  if (it == decoding_.end()) return;
  std::weak_ptr<Sequence> weak = it->second;
  std::weak_ptr<bool> guard = s_.alive;
  const std::size_t chosen = it->second->chosen;
  s_.timers.at(SteadyClock::now() + s_.options.prompt_within, [this, guard, weak, session, chosen] {
    auto seq = weak.lock();
    if (guard.expired() || !seq || seq->ended || seq->chosen != chosen || planner_.stepping(session) ||
        planner_.ready(session) || planner_.departing(session))
      return;
    drafts_failed(session, "the client's drafted rows did not reach every server within " +
                               std::to_string(s_.options.prompt_within.count()) + " ms");
    s_.changed.notify();
  });
}

// As a prefill that failed here: the leader lets the session go (a
// departure, at every server, between two steps).
void Batcher::drafts_failed(std::uint64_t session, const std::string& failure) {
  failed_before_joining(session, failure);
}

// The leader, before planning a lane's step: speculating sessions of its
// last step whose clients are drafting now would otherwise miss this step
// and run their own after it, so that the lane's steps alternate between
// them (twice the steps, each half as wide). It waits for their rows, at
// most a quarter of the last step's time (and 1 s): a slow or silent client
// delays the others' steps by that much at most, until its own deadline
// (prompt_within) ends its session.
Task<void> Batcher::wait_for_drafts(const std::vector<std::uint64_t>& last, double last_seconds) {
  auto awaiting = [&] {
    return std::ranges::any_of(last, [&](std::uint64_t session) { return planner_.awaiting_rows(session); });
  };
  if (last_seconds <= 0 || !awaiting()) co_return;
  const auto until = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                              std::chrono::duration<double>(std::min(last_seconds / 4, 1.0)));
  auto over = make_shared<bool>(false);
  std::weak_ptr<bool> guard = s_.alive;
  s_.timers.at(until, [this, guard, over] {
    if (guard.expired()) return;
    *over = true;
    s_.changed.notify();
  });
  while (!*over && !s_.mesh.cancelled() && awaiting()) co_await s_.changed.wait();
}

Task<void> Batcher::accept_drafts_of(Rss3& p, const std::vector<Sequence*>& seqs, const std::vector<Rss3Share>& rows,
                                     const std::vector<Rss3Share>& chosen,
                                     std::vector<std::unique_ptr<DraftedRows>>& kept) {
  std::vector<Rss3Share> indices;  // (K'+1, 1) each: the rows' choices as token ids
  for (const auto& hot : chosen) {
    const std::size_t n = Rss3::shape(hot).at(0);
    indices.push_back(ops::reshape<Rss3>(ops::one_hot_index<Rss3>(hot), {n, 1}));
  }
  std::vector<Rss3> forks;
  forks.reserve(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) forks.push_back(p.fork());
  std::vector<Task<std::size_t>> tasks;
  for (std::size_t i = 0; i < seqs.size(); ++i) tasks.push_back(accept_drafts(forks[i], indices[i], rows[i]));
  const auto accepted = co_await when_all(std::move(tasks));
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    kept[i]->keep(accepted[i]);  // rejected rows leave nothing behind
    sessions_.send_verified(seq, ops::rows<Rss3>(indices[i], 0, accepted[i] + 1));
    if (seq.chosen >= seq.request->request.new_tokens) end_sequence(seq, "");
  }
}

}  // namespace mpcache::serve
