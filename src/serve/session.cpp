// Sessions (modules/serve/server_parts.cppm): one session at this server,
// from its launch to its end. It runs in its own scope of the mesh's
// streams, so that its failure cancels it alone; the chosen token stays
// secret as the next step's input, and only this server's part of its index
// goes to the client.
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

std::uint64_t session_kv_bytes(const ModelConfig& c, std::uint64_t positions) {
  return 2 * c.num_layers * c.num_kv_heads * c.head_dim * positions * 2 * sizeof(Ring);
}

// Speculating, a step holds a copy of the cache per draft (DraftRows).
std::uint64_t session_memory_bytes(const ModelConfig& c, const ServeRequest& q) {
  const std::uint64_t noise = q.sampled ? 2 * q.new_tokens * c.vocab_size * sizeof(Ring) : 0;
  const std::uint64_t copies = 1 + std::min<std::uint64_t>(q.speculate, max_speculated_tokens);
  return copies * session_kv_bytes(c, q.prompt_length + q.new_tokens) + noise;
}

void Sessions::launch(std::uint64_t session, const std::shared_ptr<Request>& r) {
  const ScopeId scope = scope_of(session);
  s_.mesh.open_scope(scope);
  s_.mesh.open_scope(scope_of(session + max_scope / 2));  // a cancellation is forgotten long before its scope returns
  ++active_;
  kv_in_use_ += session_memory_bytes(s_.config, r->request);
  running_[session] = scope;
  s_.log("session " + std::to_string(session) + " for " + r->link->name + ": " +
         std::to_string(r->request.prompt_length) + " prompt tokens, up to " + std::to_string(r->request.new_tokens) +
         " new, policy " + r->request.policy);
  stop_here_at(session, -1);
  s_.tasks.spawn(run_session(session, r));
  s_.tasks.spawn(liveness_.watch_client(session, r->link));
}

Task<void> Sessions::run_session(std::uint64_t session, std::shared_ptr<Request> r) {
  ClientLink& link = *r->link;
  std::size_t chosen = 0;
  bool joined = false;
  std::string failure;
  const auto t0 = SteadyClock::now();
  try {
    send_accepted(link, session);
    co_await generate_tokens(session, r, chosen, joined);
  } catch (const Error& e) {
    failure = e.what();
  }
  if (s_.batching() && !joined && !failure.empty()) batcher_.failed_before_joining(session, failure);
  running_.erase(session);
  batcher_.forget(session);
  if (failure.empty()) {
    ++s_.stats.sessions_done;
    link.reply(Reply::number(ReplyKind::done, chosen));
    s_.log("session " + std::to_string(session) + " done: " + std::to_string(chosen) + " tokens in " +
           std::to_string(std::chrono::duration<double>(SteadyClock::now() - t0).count()) + " s");
  } else {
    ++s_.stats.sessions_failed;
    if (s_.mesh.scope_cancelled(scope_of(session)).empty() && !s_.mesh.cancelled())
      s_.mesh.cancel_scope(scope_of(session), "session " + std::to_string(session) + " failed at server " +
                                                  std::to_string(s_.id()) + ": " + failure);
    link.reply(Reply::text(ReplyKind::failed, failure));
    s_.log("session " + std::to_string(session) + " failed: " + failure);
  }
  link.close();
  liveness_.session_ended(session);  // the leader counts it at all three for the drain
  --active_;
  kv_in_use_ -= session_memory_bytes(s_.config, r->request);
  if (s_.id() == leader) admission_.start_queued();
  s_.changed.notify();
}

// The session number, then the vocabulary the client's one-hot prompt must span.
void Sessions::send_accepted(ClientLink& link, std::uint64_t session) {
  std::vector<std::byte> body = Reply::number(ReplyKind::accepted, session).body;
  const auto vocab = Reply::number(ReplyKind::accepted, s_.config.vocab_size).body;
  body.insert(body.end(), vocab.begin(), vocab.end());
  link.reply(Reply{ReplyKind::accepted, std::move(body)});
}

// The session's MPC: the client's one-hot prompt, the prefill, then each
// chosen token's secret one-hot row into the next step: here, or in the
// batched steps (`joined` once it is there).
Task<void> Sessions::generate_tokens(std::uint64_t session, std::shared_ptr<Request> r, std::size_t& chosen,
                                     bool& joined) {
  ClientLink& link = *r->link;
  const ServeRequest& q = r->request;
  Rss3 p = s_.party->scoped_session(session);
  // Truncation pairs are the batched steps' alone: this session's streams
  // run while those steps' refills make pairs (needing a quiet point), and
  // a prefill's truncations grow with the prompt, as its comparisons do.
  p.without_truncation_pairs(true);
  const std::size_t vocab = s_.config.vocab_size;
  auto prompt_came = make_shared<bool>(false);
  liveness_.fail_unless_by(r->link, prompt_came, s_.options.prompt_within, "sent no prompt shares");
  const auto prompt = co_await link.endpoint->recv(link.client_peer, prompt_stream);
  std::optional<Rss3Share> noise;
  if (q.sampled)  // sent right after the prompt: under the same deadline
    noise = client_shares::assemble(s_.id(), co_await link.endpoint->recv(link.client_peer, noise_stream),
                                    {q.new_tokens, vocab});
  *prompt_came = true;
  // Checked whole now; assembled a wave of rows at a time by the prefill.
  const Shape prompt_shape{q.prompt_length, vocab};
  client_shares::check_part(s_.id(), prompt, prompt_shape);
  auto seq = make_shared<Sequence>();
  seq->noise = std::move(noise);
  seq->session = session;
  seq->request = r;
  seq->speculate = q.speculate;  // admitted only with batching (request_problem)
  // Only the last position's logits choose the first token (chosen_row),
  // so the prefill computes no others, as generate's does.
  seq->decoder = std::make_unique<Decoder<Rss3>>(*s_.weights,
                                                 DecoderOptions{default_prefill_memory_budget, PrefillLogits::last});
  seq->policy = std::make_unique<kv::AnyPolicy<Rss3>>(
      kv::make_policy<Rss3>(q.policy, q.budget == 0 ? kv::default_budget(q.policy) : q.budget));
  Decoder<Rss3>& decoder = *seq->decoder;
  auto& policy = *seq->policy;
  // Under DCF comparisons this session's prefill and its token choice
  // compare on the circuit, as generate_party's do (StepDriver): no store
  // holds their keys, and dealt inline they would cost gigabytes per
  // prompt. The other sessions keep their own mode (Rss3::compare_on_circuit
  // is per stream); the decode steps compare with DCF keys. The driver's
  // refills are not used here: the batched steps refill the stores by their
  // own demand per row (StoreRefill), and this session's own steps (without
  // batching) deal their keys inline and truncate in two rounds.
  StepDriver<Rss3> driver(p);
  driver.before_prefill();
  auto logits = co_await decoder.prefill_one_hot(p, policy, q.prompt_length, [&](RowBlock wave) {
    return client_shares::assemble_rows(s_.id(), prompt, prompt_shape, wave.begin, wave.end);
  });
  if (s_.batching()) {  // the first token here, the others in the batched steps
    seq->row = co_await chosen_row(p, logits, *seq);
    driver.after_prefill(q.prompt_length);
    send_token(*seq);
    chosen = seq->chosen;
    if (q.new_tokens == 1) co_return;
    seq->stop_test_due = !q.stop_tokens.empty() && q.speculate == 0;  // a speculating client ends it itself
    joined = true;
    co_await batcher_.join_batches(seq);
    chosen = seq->chosen;
    if (!seq->failure.empty()) throw Error(ErrorCode::cancelled, seq->failure);
    co_return;
  }
  for (std::size_t step = 0; step < q.new_tokens; ++step) {
    seq->row = co_await chosen_row(p, logits, *seq);
    if (step == 0) driver.after_prefill(q.prompt_length);
    send_token(*seq);
    chosen = seq->chosen;
    if (step + 1 == q.new_tokens) break;
    if (q.stop_tokens.empty()) {
      logits = co_await decoder.decode_one_hot(p, policy, seq->row);
      continue;
    }
    // Whether the token is a stop token, opened to the servers while the
    // next step runs.
    Rss3 pa = p.fork(), pb = p.fork();
    auto [next_logits, hit] =
        co_await when_all(decoder.decode_one_hot(pa, policy, seq->row), pb.reveal(stop_test(*seq)));
    if (hit(0, 0) != 0) break;
    logits = std::move(next_logits);
  }
}

void Sessions::send_token(Sequence& seq) {
  seq.request->link->reply(Reply{ReplyKind::token, client_shares::open_part(ops::one_hot_index<Rss3>(seq.row))});
  count_chosen(seq);
}

void Sessions::count_chosen(Sequence& seq) {
  if (s_.options.on_step) {
    const OfflineCosts offline = batcher_.offline_costs();
    s_.options.on_step({s_.id(), seq.session, seq.chosen, s_.mesh.rounds() - offline.rounds,
                        s_.mesh.costs().payload_bytes_sent() - offline.bytes, offline,
                        s_.party->dcf_stats().inline_elements});
  }
  stop_here_at(seq.session, static_cast<std::int64_t>(seq.chosen));
  ++seq.chosen;
}

void Sessions::send_verified(Sequence& seq, const Rss3Share& tokens) {
  ByteWriter w;
  w.u64(Rss3::shape(tokens).at(0));
  const auto part = client_shares::open_part(tokens);
  w.out.insert(w.out.end(), part.begin(), part.end());
  seq.request->link->reply(Reply{ReplyKind::verified, std::move(w.out)});
  for (std::size_t i = 0; i < Rss3::shape(tokens).at(0); ++i) count_chosen(seq);
}

void Sessions::stop_here_at(std::uint64_t session, std::int64_t step) {
  const auto& at = s_.options.stop_at;
  if (!at || at->session != session || at->step != step || s_.stop_asked) return;
  s_.log("test: a stop as if asked here, at session " + std::to_string(session) + " step " + std::to_string(step));
  s_.stop_asked = true;
  s_.changed.notify();
}

Rss3Share Sessions::stop_test(const Sequence& seq) {
  return Rss3::apply(seq.row, [&](const RingTensor& t) {
    RingTensor s = ring_zeros({1, 1});
    for (auto id : seq.request->request.stop_tokens) s(0, 0) += t(0, id);
    return s;
  });
}

// The choice as a secret one-hot row (1, vocab): the argmax of the last row
// of the logits (greedy), plus the sequence's noise row if it is sampled.
Task<Rss3Share> Sessions::chosen_row(Rss3& p, const Rss3Share& logits, const Sequence& seq) {
  auto scope = cost_scope(p, CostTag::argmax);
  const std::size_t rows = Rss3::shape(logits).at(0);
  const std::size_t vocab = Rss3::shape(logits).at(1);
  co_return co_await ops::argmax_onehot_last(p, with_noise(p, ops::rows<Rss3>(logits, rows - 1, rows), {&seq}, vocab));
}

Rss3Share Sessions::with_noise(Rss3& p, Rss3Share rows, const std::vector<const Sequence*>& seqs, std::size_t vocab) {
  if (std::none_of(seqs.begin(), seqs.end(), [](const Sequence* s) { return s->noise.has_value(); })) return rows;
  std::optional<Rss3Share> noise;
  for (const Sequence* s : seqs) {
    // A greedy sequence's row: a sharing of zero (every component zero).
    Rss3Share row = s->noise ? ops::rows<Rss3>(*s->noise, s->chosen, s->chosen + 1)
                             : Rss3::apply(ops::rows<Rss3>(rows, 0, 1), [&](const RingTensor&) { return ring_zeros({1, vocab}); });
    noise = noise ? ops::stack_rows<Rss3>(*noise, row) : row;
  }
  return p.add(rows, *noise);  // local: no round, no bytes
}

}  // namespace mpcache::serve
