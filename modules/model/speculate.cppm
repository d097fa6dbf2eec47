// Speculative verification: one decode step checks K tokens the client
// drafted in the clear. The last chosen token and the K drafts go through
// every layer as K+1 causal rows of one batched step (Decoder::decode_batch,
// each row a copy of the sequence that sees the rows before it), so they
// share the step's rounds. Each row's greedy choice (argmax) stays secret;
// the accepted prefix (the longest run of drafts equal to the choice of the
// row before, plus the first correction) is computed under MPC. Its length
// is opened to every party (docs/protocols.md says what that reveals), and
// only its tokens to the client: never a later row's choice, which would be
// an extra query against the weights. The sequence then continues as the
// copy of the last accepted row, so rejected rows leave no trace in the KV
// cache or the policy.
//
// Greedy output is unchanged when each row computes exactly what a decode
// one by one would (exact truncation): the tests compare the text.
export module mpcache.model:speculate;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import :decoder;

export namespace mpcache {

// Drafted tokens a step verifies, at most.
inline constexpr std::size_t max_speculated_tokens = 16;

// What a verified step gives: `accepted` drafts (public), and at the
// client the accepted drafts and the correction (accepted + 1 tokens).
struct VerifiedStep {
  std::size_t accepted = 0;
  std::optional<std::vector<std::uint32_t>> tokens;
};

// Refuses a policy whose selection follows what it observed but which
// cannot take the row before's state of a layer (kv::LayerAdopting): its
// rows could not see the rows before them as a decode one by one would.
template <class Pol, Protocol P>
  requires kv::Policy<Pol, P>
void check_speculative_policy(const Pol& policy) {
  if (kv::OptionalMembers<P>::selects_from_observed(policy) && !kv::OptionalMembers<P>::adopts_layers(policy))
    throw Error(ErrorCode::invalid_argument,
                "speculation: policy " + std::string(policy.name()) +
                    " selects by the attention it observed at earlier steps and cannot adopt a layer's state "
                    "from the row before, so the rows of a step cannot be verified exactly; speculate with "
                    "another policy (full, mpcache, h2o, ...)");
}

namespace detail {
// prefix[j] = product of bits[0..j] (0/1 integers, (K, 1)): Hillis-Steele
// scan, ceil(log2 K) rounds of one product each.
template <Protocol P>
Task<typename P::Share> prefix_and(P& p, typename P::Share bits) {
  const std::size_t k = P::shape(bits).at(0);
  for (std::size_t shift = 1; shift < k; shift *= 2) {
    auto tail = co_await p.mul(ops::rows<P>(bits, shift, k), ops::rows<P>(bits, 0, k - shift));
    bits = ops::stack_rows<P>(ops::rows<P>(bits, 0, shift), tail);
  }
  co_return bits;
}
}  // namespace detail

// A sequence's K+1 rows in one batched step (Decoder::decode_batch): row 0
// runs on the sequence itself, row i > 0 on a copy of it made before the
// step, which also attends to rows 0..i-1. verify_drafts and the service's
// batched steps (src/serve/batch_drafts.cpp) both build their rows here.
// The slots point into this object: keep it in place until the step ends.
template <Protocol P, class Pol>
  requires kv::Policy<Pol, P> && std::copyable<Pol>
class DraftRows {
 public:
  using Slot = typename Decoder<P>::template BatchSlot<Pol>;
  DraftRows(Decoder<P>& decoder, Pol& policy, std::size_t drafts)
      : decoder_(&decoder), policy_(&policy), copies_(drafts, decoder), policies_(drafts, policy) {}
  DraftRows(const DraftRows&) = delete;
  DraftRows& operator=(const DraftRows&) = delete;

  // Appends the step's K+1 slots, in row order, row i fed row i of
  // `one_hot` (K+1, vocab).
  void add_slots(std::vector<Slot>& slots, const typename P::Share& one_hot) {
    slots.push_back(Slot{decoder_, policy_, ops::rows<P>(one_hot, 0, 1), 0});
    for (std::size_t i = 1; i <= copies_.size(); ++i)
      slots.push_back(Slot{&copies_[i - 1], &policies_[i - 1], ops::rows<P>(one_hot, i, i + 1), i});
  }
  // After the step: the sequence goes on as row `accepted` left it; the
  // rejected rows' copies are dropped with this object.
  void keep(std::size_t accepted) {
    if (accepted > copies_.size())
      throw Error(ErrorCode::protocol, "speculation: " + std::to_string(accepted) + " of " +
                                           std::to_string(copies_.size()) + " drafts accepted");
    if (accepted == 0) return;
    decoder_->take_sequence(std::move(copies_[accepted - 1]));
    *policy_ = std::move(policies_[accepted - 1]);
  }

 private:
  Decoder<P>* decoder_;
  Pol* policy_;
  std::vector<Decoder<P>> copies_;
  std::vector<Pol> policies_;
};

// The acceptance under MPC, given each row's greedy choice `choice` (K+1, 1)
// and the step's rows `one_hot` (K+1, vocab): draft j + 1 is accepted if it
// is row j's choice and every draft before it was. Returns the accepted
// count, opened to every party. K = 0: nothing to accept, no round.
template <Protocol P>
Task<std::size_t> accept_drafts(P& p, const typename P::Share& choice, const typename P::Share& one_hot) {
  const std::size_t drafts = P::shape(one_hot).at(0) - 1, vocab = P::shape(one_hot).at(1);
  if (P::shape(choice).at(0) != drafts + 1)
    throw Error(ErrorCode::invalid_argument, "speculation: " + std::to_string(P::shape(choice).at(0)) +
                                                 " choices for " + std::to_string(drafts + 1) + " rows");
  if (drafts == 0) co_return 0;
  // The drafts as secret integers: each one-hot row times 0..vocab-1.
  RingTensor ids = RingTensor::from_shape({vocab, 1});
  for (std::size_t v = 0; v < vocab; ++v) ids(v, 0) = v;
  const auto drafted = p.matmul_public(ops::rows<P>(one_hot, 1, drafts + 1), ids);  // (K, 1)
  int width = 1;  // |choice - draft| < vocab <= 2^width
  while ((std::size_t{1} << width) < vocab) ++width;
  auto matches = co_await ops::equal(p, ops::rows<P>(choice, 0, drafts), drafted, width);
  auto accepted_run = co_await detail::prefix_and(p, std::move(matches));
  const auto count = p.matmul_public(ops::transpose<P>(accepted_run), ring_filled({drafts, 1}, 1));  // (1, 1)
  const auto accepted = static_cast<std::size_t>((co_await p.reveal(count))(0, 0));
  if (accepted > drafts)
    throw Error(ErrorCode::protocol, "speculation: " + std::to_string(accepted) + " of " + std::to_string(drafts) +
                                         " drafts accepted");
  co_return accepted;
}

// One speculative step of one sequence: `rows` (at the client only) are the
// last chosen token and then `drafts` drafted tokens. K = drafts is public.
template <Protocol P, class Pol>
  requires kv::Policy<Pol, P> && std::copyable<Pol>
Task<VerifiedStep> verify_drafts(P& p, Decoder<P>& decoder, Pol& policy, PartyId client,
                                 std::optional<std::vector<std::uint32_t>> rows, std::size_t drafts) {
  check_speculative_policy<Pol, P>(policy);
  if (drafts == 0 || drafts > max_speculated_tokens)
    throw Error(ErrorCode::invalid_argument, "speculation: " + std::to_string(drafts) +
                                                 " drafted tokens a step, outside 1.." +
                                                 std::to_string(max_speculated_tokens));
  if (rows && rows->size() != drafts + 1)
    throw Error(ErrorCode::invalid_argument, "speculation: " + std::to_string(rows->size()) +
                                                 " rows for " + std::to_string(drafts) + " drafts");
  const auto one_hot = co_await decoder.one_hot_tokens(p, client, std::move(rows), drafts + 1);
  DraftRows<P, Pol> draft_rows(decoder, policy, drafts);
  std::vector<typename DraftRows<P, Pol>::Slot> slots;
  draft_rows.add_slots(slots, one_hot);
  const auto logits = co_await Decoder<P>::decode_batch(p, std::move(slots));  // (K+1, vocab)

  auto scope = cost_scope(p, CostTag::argmax);
  auto choice = (co_await ops::argmax_last(p, logits)).index;  // (K+1, 1)
  VerifiedStep out;
  out.accepted = co_await accept_drafts(p, choice, one_hot);
  // Only the accepted rows' choices: the accepted drafts and the correction.
  auto opened = co_await p.reveal_to(client, ops::rows<P>(choice, 0, out.accepted + 1));
  if (opened) {
    out.tokens.emplace();
    for (std::size_t i = 0; i <= out.accepted; ++i) out.tokens->push_back(static_cast<std::uint32_t>((*opened)(i, 0)));
  }
  draft_rows.keep(out.accepted);  // the sequence goes on as the last accepted row left it
  co_return out;
}

}  // namespace mpcache
