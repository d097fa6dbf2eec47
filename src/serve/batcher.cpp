// Batcher (modules/serve/server_parts.cppm): continuous batching under MPC.
// The leader plans each step (BatchPlanner) and tells servers 1 and 2
// (BatchStep on batch_stream), since all three must run the same step with
// the same rows in the same order; each then runs it on its lane's stream.
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

// Not batching (max_batch < 2), the planner is never asked: 1 keeps it valid.
Batcher::Batcher(ServerContext& server, Sessions& sessions, Liveness& liveness)
    : s_(server),
      sessions_(sessions),
      liveness_(liveness),
      planner_(std::max<std::size_t>(server.options.max_batch, 1), lanes()),
      store_refill_(server.options.refill_steps_ahead) {}

// The leader's lanes: the servers' limit, but one under an offline store,
// whose refills need a point where no step runs.
std::size_t Batcher::lanes() const {
  const bool store = s_.options.rss3.offline_budget > 0 || s_.options.rss3.truncation_pairs_budget > 0;
  return store ? 1 : s_.options.decode_lanes;
}

void Batcher::start() {
  if (!s_.batching()) return;
  if (s_.id() == leader) {
    for (std::size_t lane = 0; lane < lanes(); ++lane) s_.tasks.spawn(lead_lane(lane));
    for (PartyId peer = 1; peer < 3; ++peer) s_.tasks.spawn(hear_batch_ready(peer));
  } else {
    s_.tasks.spawn(follow_batches());
  }
}

// Servers 1 and 2 tell the leader, which plans a session's steps only once
// all three have it.
Task<void> Batcher::join_batches(std::shared_ptr<Sequence> seq) {
  const std::uint64_t session = seq->session;
  if (auto it = left_early_.find(session); it != left_early_.end()) {
    seq->ended = true;
    seq->failure = it->second;
    left_early_.erase(it);
    co_return;
  }
  // A speculating session is ready for a step once its rows came
  // (receive_drafts), at every server, for each step anew.
  if (s_.id() != leader && seq->speculate == 0)
    s_.mesh.send(leader, batch_ready_stream, BatchReady{session, true, {}}.encode());
  if (s_.id() == leader) {
    if (seq->speculate > 0) planner_.speculating(session);
    else planner_.joined(session, leader);
  }
  decoding_[session] = seq;
  if (seq->speculate > 0) s_.tasks.spawn(receive_drafts(seq));
  s_.changed.notify();
  while (!seq->ended) co_await s_.changed.wait();
}

void Batcher::failed_before_joining(std::uint64_t session, const std::string& failure) {
  const std::string why =
      "session " + std::to_string(session) + " failed at server " + std::to_string(s_.id()) + ": " + failure;
  if (s_.id() == leader) {
    planner_.depart(session, why);
    s_.changed.notify();
  } else {
    s_.mesh.send(leader, batch_ready_stream, BatchReady{session, false, failure}.encode());
  }
}

void Batcher::forget(std::uint64_t session) {
  left_early_.erase(session);
  planner_.ended(session);  // the leader: what servers 1 and 2 said of a session it never joined
}

// A session leaves the batches: now if it is in them, or when it comes.
void Batcher::leave(std::uint64_t session, const std::string& why) {
  if (auto it = decoding_.find(session); it != decoding_.end()) return end_sequence(*it->second, why);
  if (sessions_.running(session)) left_early_[session] = why;
}

void Batcher::end_sequence(Sequence& seq, const std::string& failure) {
  seq.ended = true;
  seq.failure = failure;
  decoding_.erase(seq.session);
  planner_.ended(seq.session);
  s_.changed.notify();
}

Task<void> Batcher::lead_lane(std::size_t lane) {
  std::vector<std::uint64_t> last;  // the sessions of this lane's last step
  double last_seconds = 0;          // and how long it took
  for (;;) {
    while (!s_.mesh.cancelled() && !planner_.has_work()) co_await s_.changed.wait();
    if (s_.mesh.cancelled()) co_return;
    co_await wait_for_drafts(last, last_seconds);
    for (const auto& [session, seq] : decoding_)  // clients gone, sessions cut by a drain
      if (auto why = s_.mesh.scope_cancelled(scope_of(session)); !why.empty() && !planner_.departing(session))
        planner_.depart(session, why);
    BatchStep step = planner_.plan(lane);
    for (const auto& [session, why] : step.departures) leave(session, why);
    if (step.sessions.empty() && step.departures.empty()) continue;
    if (!step.sessions.empty()) begin_step(lane, step.sessions);
    for (PartyId peer = 1; peer < 3; ++peer) s_.mesh.send(peer, batch_stream, step.encode());
    if (step.sessions.empty()) continue;
    const auto t0 = SteadyClock::now();
    co_await run_lane_step(lane, step.sessions);
    last = step.sessions;
    last_seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  }
}

Task<void> Batcher::follow_batches() {  // servers 1 and 2
  for (;;) {
    std::vector<std::byte> bytes;
    try {
      bytes = co_await s_.mesh.recv_idle(leader, batch_stream);
    } catch (const Error&) {
      co_return;  // the mesh is gone or cancelled: run() reports it
    }
    BatchStep step;
    try {
      step = BatchStep::decode(bytes);
    } catch (const Error& e) {
      co_return lose_mesh(e.what());
    }
    if (step.lane >= max_lanes)
      co_return lose_mesh("server 0 planned a decode step in lane " + std::to_string(step.lane) + ", past the " +
                          std::to_string(max_lanes) + " lanes a server may run");
    // The leader starts a step once the lane's last one and the steps of
    // the sessions it names have ended there; here they may still run.
    while (!s_.mesh_lost && !s_.mesh.cancelled() && !planner_.may_start(step)) co_await s_.changed.wait();
    if (s_.mesh_lost || s_.mesh.cancelled()) co_return;
    for (const auto& [session, why] : step.departures) leave(session, why);
    if (step.sessions.empty()) continue;
    begin_step(step.lane, step.sessions);
    s_.tasks.spawn(run_lane_step(step.lane, std::move(step.sessions)));
  }
}

// Marks a lane's step as running (at once, before any other message is
// read), opening the lane's stream, and those before it, at its first use.
// The leader's plan marked it already.
void Batcher::begin_step(std::uint64_t lane, const std::vector<std::uint64_t>& sessions) {
  while (lane_streams_.size() <= lane) lane_streams_.push_back(s_.party->session());
  if (s_.id() != leader) planner_.start(lane, sessions);
}

Task<void> Batcher::run_lane_step(std::uint64_t lane, std::vector<std::uint64_t> sessions) {
  std::exception_ptr failed;  // run_step handles Errors; anything else still frees the lane
  try {
    co_await run_step(lane_streams_[lane], sessions);
  } catch (...) {
    failed = std::current_exception();
  }
  planner_.finish(lane, sessions);
  s_.changed.notify();
  if (failed) std::rethrow_exception(failed);
}

// Leader: what servers 1 and 2 say of each session's prefill.
Task<void> Batcher::hear_batch_ready(PartyId peer) {
  for (;;) {
    BatchReady b;
    try {
      b = BatchReady::decode(co_await s_.mesh.recv_idle(peer, batch_ready_stream));
    } catch (const Error&) {
      co_return;
    }
    if (!sessions_.running(b.session)) continue;  // it ended here already
    if (b.joined) {
      planner_.joined(b.session, peer);
    } else {
      planner_.depart(b.session, "session " + std::to_string(b.session) + " failed at server " +
                                     std::to_string(peer) + ": " + b.why);
    }
    s_.changed.notify();
  }
}

// One batched decode step of `sessions` (rows in that order), the same at
// every server: the stop tests due ride along, then one argmax for the
// sessions that go on, and each one's token to its client. A speculating
// session's rows (its last token and its drafts, from its client) sit side
// by side in the step (DraftRows); its acceptance follows the argmax.
Task<void> Batcher::run_step(Rss3& p, const std::vector<std::uint64_t>& sessions) {
  std::vector<std::shared_ptr<Sequence>> batch;
  for (auto session : sessions) {
    auto it = decoding_.find(session);
    if (it == decoding_.end())
      co_return lose_mesh("server 0 planned a decode step of session " + std::to_string(session) +
                          ", which is not decoding at server " + std::to_string(s_.id()));
    if (it->second->speculate > 0 && !it->second->drafted)
      co_return lose_mesh("server 0 planned a decode step of session " + std::to_string(session) +
                          ", whose drafted rows have not come to server " + std::to_string(s_.id()));
    batch.push_back(it->second);
  }
  // Each sequence's rows: one, or a speculating one's K'+1.
  std::vector<Rss3Share> drafted(batch.size());
  std::vector<std::size_t> first_row(batch.size() + 1, 0);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i]->speculate > 0) drafted[i] = *std::exchange(batch[i]->drafted, std::nullopt);
    first_row[i + 1] = first_row[i] + (batch[i]->speculate > 0 ? Rss3::shape(drafted[i]).at(0) : 1);
  }
  ++s_.stats.batched_steps;
  s_.stats.batched_rows += first_row.back();
  const auto speculating_now = std::count_if(batch.begin(), batch.end(), [](const auto& seq) { return seq->speculate > 0; });
  if (speculating_now > 0) ++s_.stats.speculative_steps;
  if (speculating_now > 0 && speculating_now < std::ssize(batch)) ++s_.stats.mixed_steps;
  try {
    co_await store_refill_.before_step(*s_.party, p, first_row.back());  // offline, before the step's window
    std::vector<Decoder<Rss3>::BatchSlot<kv::AnyPolicy<Rss3>>> slots;
    std::vector<std::unique_ptr<DraftedRows>> draft_rows(batch.size());
    std::vector<std::size_t> tested;
    std::optional<Rss3Share> tests;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i]->speculate > 0) {
        draft_rows[i] = std::make_unique<DraftedRows>(*batch[i]->decoder, *batch[i]->policy,
                                                      Rss3::shape(drafted[i]).at(0) - 1);
        draft_rows[i]->add_slots(slots, drafted[i]);
        continue;
      }
      slots.push_back({batch[i]->decoder.get(), batch[i]->policy.get(), batch[i]->row});
      if (!batch[i]->stop_test_due) continue;
      tested.push_back(i);
      tests = tests ? ops::stack_rows<Rss3>(*tests, Sessions::stop_test(*batch[i])) : Sessions::stop_test(*batch[i]);
    }
    Rss3Share logits;
    std::vector<bool> stopped(batch.size(), false);
    // The decode on the step's first fork whether or not tests ride along,
    // so that its truncations keep their plan keys from step to step.
    Rss3 pa = p.fork();
    if (tests) {
      Rss3 pb = p.fork();
      auto [next_logits, hits] = co_await when_all(Decoder<Rss3>::decode_batch(pa, std::move(slots)), pb.reveal(*tests));
      logits = std::move(next_logits);
      for (std::size_t k = 0; k < tested.size(); ++k) stopped[tested[k]] = hits(k, 0) != 0;
    } else {
      logits = co_await Decoder<Rss3>::decode_batch(pa, std::move(slots));
    }
    std::vector<std::size_t> going;
    std::optional<Rss3Share> rows;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (stopped[i]) {
        end_sequence(*batch[i], "");
        continue;
      }
      going.push_back(i);
    }
    if (going.empty()) co_return;
    if (going.size() == batch.size()) {
      rows = std::move(logits);  // the usual step: every session goes on, no copy
    } else {
      for (std::size_t i : going) {
        auto row = ops::rows<Rss3>(logits, first_row[i], first_row[i + 1]);
        rows = rows ? ops::stack_rows<Rss3>(*rows, row) : row;
      }
    }
    Rss3Share chosen;
    {
      auto scope = cost_scope(p, CostTag::argmax);
      std::vector<const Sequence*> row_seqs;  // one per row (a speculating one: never sampled, no noise)
      for (std::size_t i : going) row_seqs.insert(row_seqs.end(), first_row[i + 1] - first_row[i], batch[i].get());
      chosen = co_await ops::argmax_onehot_last(p, Sessions::with_noise(p, std::move(*rows), row_seqs,
                                                                         s_.config.vocab_size));
    }
    std::vector<Sequence*> speculating;
    std::vector<Rss3Share> spec_rows, spec_chosen;
    std::vector<std::unique_ptr<DraftedRows>> spec_kept;
    std::size_t at = 0;  // row of `chosen`
    for (std::size_t i : going) {
      Sequence& seq = *batch[i];
      const std::size_t n = first_row[i + 1] - first_row[i];
      if (seq.speculate > 0) {
        speculating.push_back(&seq);
        spec_rows.push_back(std::move(drafted[i]));
        spec_chosen.push_back(ops::rows<Rss3>(chosen, at, at + n));
        spec_kept.push_back(std::move(draft_rows[i]));
        at += n;
        continue;
      }
      seq.row = ops::rows<Rss3>(chosen, at, at + 1);
      ++at;
      sessions_.send_token(seq);
      seq.stop_test_due = !seq.request->request.stop_tokens.empty();
      if (seq.chosen == seq.request->request.new_tokens) end_sequence(seq, "");
    }
    if (!speculating.empty()) co_await accept_drafts_of(p, speculating, spec_rows, spec_chosen, spec_kept);
  } catch (const Error& e) {
    // The step's streams are the mesh's own: a failure here is the mesh's.
    co_return lose_mesh(std::string("a batched decode step failed: ") + e.what());
  }
}

void Batcher::end_all(const std::string& why) {
  for (auto& [session, seq] : std::map(decoding_)) end_sequence(*seq, why);
  s_.changed.notify();
}

// The mesh cannot go on (a broken batched step): every session ends, and
// run() stops with an error (systemd restarts the service).
void Batcher::lose_mesh(const std::string& why) {
  s_.log(why);
  if (s_.mesh_lost_why.empty()) s_.mesh_lost_why = why;
  s_.mesh_lost = true;
  end_all(why);
  // The others must stop with an error too, not as after an orderly stop.
  if (!s_.mesh.cancelled()) s_.mesh.cancel("server " + std::to_string(s_.id()) + " lost its mesh (" + why + ")");
  s_.changed.notify();
}

}  // namespace mpcache::serve
