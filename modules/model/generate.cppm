// Private generation: prefill a prompt only the client knows, then decode
// greedily; each next token is chosen under MPC (argmax of the last logits)
// and opened to the client alone, who inputs it again for the next step.
//
// `generate` is one party's side, generic over the Protocol, given a Decoder
// and a KV policy; it reports each finished step (and, during the prefill,
// each finished layer) through a GenerationObserver and keeps no state of its
// own. `generate_party` (:generate_party) is one party's whole job, under
// rss3 or add2, over its Endpoint (in-process, or TCP in its own process):
// pairwise keys, the client's public job header, the model owner's
// weights, the policy, generation.
//
// Stop tokens (EOS): only the client learns each token, so only it can see
// one; after every step but the last it tells the other parties whether
// generation goes on (GenerationStopSignal: one public byte to each, sent in
// the tick in which it inputs its next token, so the word shares that
// message's round and adds none), and every party ends after the same step.
//
// Cancellation: a stop requested on the token of a request (or of
// generate_party) ends the generation with Error(cancelled) before the next
// step; generate_party also hands the token to its Endpoint, so a stop that
// comes mid-step, from any thread, cancels at the end of the loop's tick,
// and every other party unwinds with Error(cancelled) naming this one.
module;
#include "backends.hpp"
export module mpcache.model:generate;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import :config;
import :weights;
import :prefill_memory;
import :decoder;
import :step_driver;
import :draft;
import :speculate;

export namespace mpcache {

enum class GenerationPhase { prefill, decode };

inline const char* phase_name(GenerationPhase phase) noexcept {
  return phase == GenerationPhase::prefill ? "prefill" : "decode";
}

// One finished step at one party. Step 0 is the prefill, which also chooses
// the first token; step s >= 1 decodes token s-1 and chooses token s.
struct GenerationStep {
  GenerationPhase phase = GenerationPhase::prefill;
  std::size_t step = 0;
  std::optional<std::uint32_t> token;  // the chosen token: at the client only (a speculative step's last)
  double seconds = 0;                  // this party's wall time of the step
  CostCounters costs;                  // this party's traffic in the step
  std::uint64_t clock_before = 0;      // Lamport clock (rounds) at the start
  std::uint64_t clock_after = 0;       //   and at the end of the step
  // A speculative step: drafts verified and accepted (public), and at the
  // client every token it chose (the accepted drafts, then the correction).
  std::size_t drafted = 0, accepted = 0;
  std::vector<std::uint32_t> tokens;
};

// During the prefill: `layer` (0-based) of `layers` is done for all `tokens`.
struct PrefillProgress {
  std::size_t layer = 0;
  std::size_t layers = 0;
  std::size_t tokens = 0;
  CostCounters costs;  // this party's traffic since the prefill started
};

// All members are optional. `costs` snapshots this party's counters (e.g.
// `[&] { return endpoint.costs(); }`); without it steps report zero traffic.
struct GenerationObserver {
  std::function<void(const PrefillProgress&)> prefill_layer;
  std::function<void(const GenerationStep&)> step;
  std::function<CostCounters()> costs;
};

// How the client tells the other parties, after each step but the last,
// whether generation goes on (false: it chose a stop token). Give `send` at
// the client and `receive` at the others, or neither anywhere: then the
// generation runs to new_tokens. One party alone (plain, ref) needs only a
// `send` that does nothing.
struct GenerationStopSignal {
  std::function<void(bool go_on)> send;  // the client's
  std::function<Task<bool>()> receive;   // every other party's
  // Steps a party runs ahead of the word (add2's dealer: 1, so that it
  // never waits on the online phase; what it does for a step that does not
  // happen is never used). It reads the words left at the end.
  std::size_t lag = 0;
};

struct GenerationRequest {
  PartyId client = 0;                                 // gives the prompt, learns the tokens
  std::optional<std::vector<std::uint32_t>> prompt;   // token ids, at the client only
  std::size_t prompt_length = 0;                      // public
  std::size_t new_tokens = 0;                         // public: the most tokens generated
  std::stop_token stop;  // a stop requested here ends the generation before its next step
  // At the client only: generation ends once it chooses one of these (the
  // tokenizer's EOS ids); empty: it runs to new_tokens. Needs stop_signal.
  std::vector<std::uint32_t> stop_tokens = {};
  GenerationStopSignal stop_signal = {};
  // Speculative decoding (public): each decode step verifies up to this
  // many tokens the client's `draft` proposes (0: one token a step). Greedy
  // output is the same; every party learns how many each step accepted.
  std::size_t speculate = 0;
  Drafter draft = {};  // at the client only, when speculating
};

// Greedy choice: the secret id of the largest of the last row's logits
// (1, vocab), an argmax over the vocabulary.
template <Protocol P>
Task<typename P::Share> next_token(P& p, const typename P::Share& logits) {
  auto scope = cost_scope(p, CostTag::argmax);
  const std::size_t rows = P::shape(logits).at(0);
  auto best = co_await ops::argmax_last(p, ops::rows<P>(logits, rows - 1, rows));
  co_return best.index;
}

// Greedy private generation, one party's side. Returns the chosen tokens at
// the client and an empty vector elsewhere.
template <Protocol P, class Pol>
  requires kv::Policy<Pol, P>
Task<std::vector<std::uint32_t>> generate(P& p, Decoder<P>& decoder, Pol& policy, GenerationRequest request,
                                          GenerationObserver observer = {}) {
  const ModelConfig& c = decoder.config();
  if (request.prompt_length == 0) throw Error(ErrorCode::invalid_argument, "generate: empty prompt");
  if (request.new_tokens == 0) throw Error(ErrorCode::invalid_argument, "generate: zero new tokens");
  // The last chosen token is not decoded, so the cache ends one short of this.
  if (request.prompt_length + request.new_tokens > c.max_positions)
    throw Error(ErrorCode::invalid_argument,
                "generate: prompt (" + std::to_string(request.prompt_length) + ") + new tokens (" +
                    std::to_string(request.new_tokens) + ") exceed the model's " +
                    std::to_string(c.max_positions) + " positions");
  const bool is_client = p.party_id() == request.client;
  if (is_client && !request.prompt)
    throw Error(ErrorCode::invalid_argument, "generate: the client (party " + std::to_string(request.client) +
                                                 ") gave no prompt");
  if (!is_client && request.prompt)
    throw Error(ErrorCode::invalid_argument, "generate: party " + std::to_string(p.party_id()) +
                                                 " is not the client but gave a prompt");
  if (request.prompt && request.prompt->size() != request.prompt_length)
    throw Error(ErrorCode::invalid_argument, "generate: prompt of " + std::to_string(request.prompt->size()) +
                                                 " tokens, announced " + std::to_string(request.prompt_length));
  if (!request.stop_tokens.empty() && !(is_client && request.stop_signal.send))
    throw Error(ErrorCode::invalid_argument,
                is_client ? "generate: stop tokens need a stop signal to tell the other parties"
                          : "generate: party " + std::to_string(p.party_id()) +
                                " is not the client but gave stop tokens (only the client sees the tokens)");

  if (request.speculate > max_speculated_tokens)
    throw Error(ErrorCode::invalid_argument, "generate: speculate " + std::to_string(request.speculate) +
                                                 " tokens a step, outside 0.." + std::to_string(max_speculated_tokens));
  if (request.speculate > 0) {
    if (is_client && !request.draft)
      throw Error(ErrorCode::invalid_argument, "generate: speculation needs the client's drafter");
    if (request.stop_signal.lag > 0)
      throw Error(ErrorCode::invalid_argument, "generate: speculation needs every party in step (no lag: not add2)");
    if constexpr (std::copyable<Pol>) check_speculative_policy<Pol, P>(policy);
    else throw Error(ErrorCode::invalid_argument, "generate: speculation copies the policy, which cannot be copied");
  }
  // The client's drafts follow everything it holds: the prompt, the output.
  std::vector<std::uint32_t> context;
  if (is_client && request.speculate > 0) context = *request.prompt;

  using Clock = std::chrono::steady_clock;
  auto snapshot = [&] { return observer.costs ? observer.costs() : CostCounters{}; };
  const CostCounters prefill_start = snapshot();
  std::function<void(std::size_t)> layer_done;
  if (observer.prefill_layer)
    layer_done = [&](std::size_t layer) {
      observer.prefill_layer({layer, c.num_layers, request.prompt_length, snapshot() - prefill_start});
    };

  // The prefill on the circuit under DCF comparisons, the offline stores'
  // refills before each decode step (StepDriver).
  StepDriver<P> driver(p);
  std::vector<std::uint32_t> generated;
  std::optional<std::uint32_t> next;  // the last chosen token, at the client
  typename P::Share logits;
  const bool hears = !is_client && request.stop_signal.receive;  // the client's word after each step
  std::size_t heard = 0;                                         // words read: word i is about step i + 1
  bool told_to_stop = false;
  std::size_t chosen = 0;  // tokens chosen so far, known to every party
  for (std::size_t step = 0; chosen < request.new_tokens; ++step) {
    if (request.stop.stop_requested())
      throw Error(ErrorCode::cancelled, "generation stopped by its caller before step " + std::to_string(step));
    CostCounters before = snapshot();
    auto t0 = Clock::now();
    std::size_t drafts = 0;
    if (step == 0) {
      // Under DCF comparisons the prefill and its token choice compare on
      // the circuit: no store holds their keys. The decode steps take theirs
      // from the store, or dealt inline.
      driver.before_prefill();
      logits = co_await decoder.prefill(p, policy, request.client, std::move(request.prompt),
                                        request.prompt_length, std::move(layer_done));
    } else {
      // The client's word about this step arrives with its input of the last
      // token: no round of its own. A party `lag` steps ahead reads an older one.
      while (hears && !told_to_stop && heard + request.stop_signal.lag < step) {
        told_to_stop = !co_await request.stop_signal.receive();
        ++heard;
      }
      if (told_to_stop) break;
      // Offline, outside the step's window: truncation pairs and DCF keys
      // for it, from the last step's demand (for the first, the prefill's per
      // prompt token).
      const bool offline = co_await driver.before_step(step - 1);
      if (offline) {
        before = snapshot();
        t0 = Clock::now();
      }
      // Drafts the budget leaves room for (public: every party counts).
      drafts = std::min(request.speculate, request.new_tokens - chosen - 1);
      if (drafts == 0) logits = co_await decoder.decode(p, policy, request.client, next);
    }
    std::optional<std::vector<std::uint32_t>> step_tokens;
    std::size_t accepted = 0;
    if (drafts > 0) {
      if constexpr (std::copyable<Pol>) {
        std::optional<std::vector<std::uint32_t>> rows;
        if (is_client) {
          rows = request.draft(context, drafts);
          if (rows->size() != drafts)
            throw Error(ErrorCode::invalid_argument, "generate: the drafter gave " + std::to_string(rows->size()) +
                                                         " tokens for " + std::to_string(drafts));
          rows->insert(rows->begin(), *next);
        }
        const VerifiedStep verified = co_await verify_drafts(p, decoder, policy, request.client, std::move(rows), drafts);
        accepted = verified.accepted;
        step_tokens = verified.tokens;
      }
    } else {
      auto opened = co_await p.reveal_to(request.client, co_await next_token(p, logits));  // only the client learns it
      if (opened) step_tokens = std::vector<std::uint32_t>{static_cast<std::uint32_t>((*opened)(0, 0))};
    }
    if (step == 0) driver.after_prefill(request.prompt_length);
    chosen += accepted + 1;
    next.reset();
    bool go_on = true;
    if (step_tokens) {
      // A stop token ends the text there, also within a step's accepted drafts.
      std::size_t kept = 0;
      while (kept < step_tokens->size() && go_on) {
        next = (*step_tokens)[kept++];
        generated.push_back(*next);
        if (!context.empty()) context.push_back(*next);
        go_on = std::find(request.stop_tokens.begin(), request.stop_tokens.end(), *next) == request.stop_tokens.end();
      }
      step_tokens->resize(kept);
      // Sent now, it leaves with the next step's input (same tick).
      if (is_client && chosen < request.new_tokens && request.stop_signal.send) request.stop_signal.send(go_on);
    }
    const CostCounters after = snapshot();
    if (observer.step)
      observer.step({step == 0 ? GenerationPhase::prefill : GenerationPhase::decode, step, next,
                     std::chrono::duration<double>(Clock::now() - t0).count(), after - before, before.rounds,
                     after.rounds, drafts, accepted, step_tokens.value_or(std::vector<std::uint32_t>{})});
    if (!go_on) break;
  }
  // Words a party ahead has not read (a speculating run has none ahead).
  while (request.speculate == 0 && hears && !told_to_stop && heard + 1 < request.new_tokens) {
    told_to_stop = !co_await request.stop_signal.receive();
    ++heard;
  }
  co_return generated;
}

// Float64 logits of the last position after the prompt and after each of
// `chosen` but the last (teacher-forced: the Ref decoder reads the tokens a
// private run chose, under the same policy), one vector per step: what each
// chosen token should be the argmax of. A debugging and accuracy aid for
// someone who holds both the prompt and the weights, never part of the
// protocol.
template <class Pol>
  requires kv::Policy<Pol, Ref>
Task<std::vector<std::vector<double>>> teacher_forced_logits(Ref& p, Decoder<Ref>& decoder, Pol& policy,
                                                             const std::vector<std::uint32_t>& prompt,
                                                             const std::vector<std::uint32_t>& chosen) {
  std::vector<std::vector<double>> out;
  Ref::Share logits;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    logits = i == 0 ? co_await decoder.prefill(p, policy, 0, prompt, prompt.size())
                    : co_await decoder.decode(p, policy, 0, chosen[i - 1]);
    const auto r = p.to_real(logits);
    const std::size_t rows = r.shape()[0], v = r.shape()[1];
    out.emplace_back(r.data() + (rows - 1) * v, r.data() + rows * v);
  }
  co_return out;
}

}  // namespace mpcache

// Compiled once, in src/model/instantiate_*.cpp (one file per backend).
namespace mpcache {
#define MPCACHE_EXTERN_GENERATE(B)                                                                          \
  extern template Task<std::vector<std::uint32_t>> generate<B, kv::AnyPolicy<B>>(                           \
      B&, Decoder<B>&, kv::AnyPolicy<B>&, GenerationRequest, GenerationObserver);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_EXTERN_GENERATE)
#undef MPCACHE_EXTERN_GENERATE
extern template Task<std::vector<std::vector<double>>> teacher_forced_logits<kv::AnyPolicy<Ref>>(Ref&, Decoder<Ref>&, kv::AnyPolicy<Ref>&, const std::vector<std::uint32_t>&, const std::vector<std::uint32_t>&);
}  // namespace mpcache
