// The KV-cache Policy concept and what the decoder shows a policy.
//
// The decoder keeps the full cache (keys after RoPE, values) per layer and KV
// head. After the prefill of each layer it hands the policy that layer's
// prefill attention (look-once eviction, heavy hitters, observation windows);
// at every decode step it asks the policy which cached tokens the step
// attends to, and afterwards shows it the attention weights the step produced
// over that selection (accumulated-attention policies).
//
// A selection is returned as secret tensors (the gathered keys and values and
// the integer positions they came from), never as clear indices, so the same
// policy code runs under MPC. Its size is public and fixed by the budget.
export module mpcache.kv:policy;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;

export namespace mpcache::kv {

template <Protocol P>
struct HeadCache {
  typename P::Share keys;    // (T - first, d), after RoPE
  typename P::Share values;  // (T - first, d)
  // Position of row 0: 0 unless the policy keeps the cache itself
  // (OwnsCache), when the decoder holds only the rows it has not yet taken.
  std::size_t first = 0;
};

template <Protocol P>
struct PrefillView {
  std::size_t layer = 0;
  std::size_t tokens = 0;  // T
  std::size_t group = 1;   // query heads per KV head
  // Per KV head: causal attention weights (group * T, T), row h * T + t is
  // query head h of the group at position t. Empty for a policy whose
  // reads_prefill_attention (any_policy.cppm) says it does not read them.
  const std::vector<typename P::Share>* probs = nullptr;
  const std::vector<HeadCache<P>>* cache = nullptr;  // per KV head, T tokens
};

template <Protocol P>
struct StepView {
  std::size_t layer = 0;
  std::size_t position = 0;  // of the current token; the cache holds position + 1 tokens
  std::size_t group = 1;
  const std::vector<typename P::Share>* queries = nullptr;  // per KV head (group, d), after RoPE and 1/sqrt(d)
  const std::vector<HeadCache<P>>* cache = nullptr;
  // A later row of a speculative step: the row before's queries. A policy
  // that ranks ahead ranks this row with them, as the step before would
  // have (nullptr: a step's first row, which has its pick from the last step).
  const std::vector<typename P::Share>* previous_queries = nullptr;
};

// The step's queries up to one unknown positive factor c per step (and
// layer): for each KV head (group, d), c q after RoPE and 1/sqrt(d). The
// decoder's are the pre-norm hidden state projected by diag(gamma) W_q, so c
// is the norm's 1/rms.
template <Protocol P>
struct RankView {
  std::size_t layer = 0;
  std::size_t position = 0;  // of the current token, not yet in the cache
  std::size_t group = 1;
  const std::vector<typename P::Share>* scaled_queries = nullptr;
};

// A selection head attended in place (ops::cluster_attention): rows
// [0, span.first) of a policy's token list, the clusters that one-hot rows
// `hot` (k, f) pick among its clusters [0, f), and the tail from f*cluster
// on. The list's rows stay where they are: the pointers are the policy's,
// valid until its next select() or observe().
template <Protocol P>
struct ClusterPick {
  const typename P::Share* keys = nullptr;       // (L, d)
  const typename P::Share* values = nullptr;     // (L, d)
  const typename P::Share* positions = nullptr;  // (L)
  typename P::Share hot;                         // (k, f)
  ops::ClusterSpan span;
};

// Per KV head, either the rows attended (keys, values, positions) or, where
// picks[j] is set, a ClusterPick (keys[j], values[j] and positions[j] then
// hold nothing). materialize() (clusters.cppm) turns picks into rows.
template <Protocol P>
struct Selection {
  std::vector<typename P::Share> keys;       // per KV head (n, d)
  std::vector<typename P::Share> values;     // per KV head (n, d)
  std::vector<typename P::Share> positions;  // per KV head (n), integers
  std::vector<std::optional<ClusterPick<P>>> picks;  // empty, or one per KV head
  bool picked(std::size_t head) const { return head < picks.size() && picks[head].has_value(); }
};

// Tokens KV head `head` of a selection attends.
template <Protocol P>
std::size_t selected_tokens(const Selection<P>& sel, std::size_t head) {
  if (!sel.picked(head)) return P::shape(sel.keys.at(head)).at(0);
  const ClusterPick<P>& pick = *sel.picks[head];
  return ops::attended_count(pick.span, P::shape(pick.hot).at(0), P::shape(pick.hot).at(1),
                             P::shape(*pick.keys).at(0));
}

template <class Pol, class P>
concept Policy =
    Protocol<P> && requires(Pol& pol, const Pol& cpol, P& p, const PrefillView<P>& pre,
                            const StepView<P>& step, const std::vector<typename P::Share>& probs,
                            std::size_t n) {
      { cpol.name() } -> std::convertible_to<std::string>;
      // Start a new sequence: layers, KV heads.
      { pol.reset(n, n) } -> std::same_as<void>;
      { pol.after_prefill(p, pre) } -> std::same_as<Task<void>>;
      { pol.select(p, step) } -> std::same_as<Task<Selection<P>>>;
      // Attention weights of the step, per KV head (group, n) over the selection.
      { pol.observe(p, step, probs) } -> std::same_as<Task<void>>;
    };

// Optional members (prefetch, early ranking, a cache of its own, the bytes
// it holds) are listed, with their defaults, in any_policy.cppm
// (MPCACHE_KV_POLICY_MEMBERS); callers reach them through
// OptionalMembers<P>. The concepts below name three of them: the decoder
// gives a prefetching policy a stream of its own, the tests check that
// wrappers keep early ranking visible, and a speculative step chains the
// rows of a policy that adopts layers.

// Has prefetch: once layer - 1 has selected at `position`, a policy may start
// work for `layer` that needs only earlier tokens (MPCache's index sharing
// gathers its clusters); the decoder runs it concurrently with the rest of
// layer - 1.
template <class Pol, class P>
concept Prefetching = Protocol<P> && requires(Pol& pol, P& p, std::size_t n) {
  { pol.prefetch(p, n, n) } -> std::same_as<Task<void>>;
};

// Has ranks_early and rank: a policy whose ranking of cached tokens is
// invariant under a positive scaling of the query (q . r, or a per-dimension
// upper bound such as q+ . r_max + q- . r_min) can rank from RankView's
// scaled queries, which exist before the norm has produced q: the decoder
// calls rank() concurrently with the layer's norm and projections (for
// layers where ranks_early(layer)), then select() at the same position,
// which uses what rank() chose. rank() may use only tokens before the
// current one; select() without a matching rank() must rank by itself.
template <class Pol, class P>
concept EarlyRanking = Protocol<P> && requires(Pol& pol, const Pol& cpol, P& p, const RankView<P>& view,
                                               std::size_t n) {
  { cpol.ranks_early(n) } -> std::convertible_to<bool>;
  { pol.rank(p, view) } -> std::same_as<Task<void>>;
};

// Has adopt_layer: a policy whose selection follows the attention it
// observed (selects_from_observed) keeps its state per layer, and one copy
// can take another's state of one layer. A speculative step's row i runs on
// a copy of the policy as it was before the step; at each layer it adopts
// row i - 1's state once row i - 1 has attended and observed there, so it
// selects as a decode one token at a time would (the rows of such a policy
// take turns within each layer, the rest of the layer stays shared).
template <class Pol>
concept LayerAdopting = requires(Pol& pol, const Pol& source, std::size_t layer) {
  { pol.adopt_layer(source, layer) } -> std::same_as<void>;
};

// ---------------------------------------------------------------------------
// Helpers shared by the policies (all generic, no clear-text shortcuts).

// A public integer vector as a (secret-typed) share shaped like `like`.
template <Protocol P>
typename P::Share public_integers(const P& p, const typename P::Share& like,
                                  const std::vector<std::size_t>& values) {
  RingTensor t = RingTensor::from_shape({values.size()});
  for (std::size_t i = 0; i < values.size(); ++i) t(i) = values[i];
  const auto zeros = P::apply(like, [&](const RingTensor&) { return ring_zeros({values.size()}); });
  return p.add_public(zeros, t);
}

template <Protocol P>
typename P::Share public_range(const P& p, const typename P::Share& like, std::size_t begin,
                               std::size_t end) {
  std::vector<std::size_t> v(end - begin);
  std::iota(v.begin(), v.end(), begin);
  return public_integers(p, like, v);
}

// Rows of `table` (T, d) at secret integer indices (k) -> (k, d): one-hot,
// then one matmul (0/1 times fixed point needs no truncation).
template <Protocol P>
Task<typename P::Share> gather_rows(P& p, const typename P::Share& table,
                                    const typename P::Share& indices) {
  const std::size_t t = P::shape(table).at(0);
  auto hot = co_await ops::one_hot(p, indices, t);  // (k, T)
  co_return co_await p.matmul(hot, table);
}

// Integer positions (k) gathered the same way.
template <Protocol P>
Task<typename P::Share> gather_values(P& p, const typename P::Share& vector,
                                      const typename P::Share& indices) {
  const std::size_t t = P::shape(vector).at(0);
  auto column = ops::reshape<P>(vector, {t, 1});
  auto picked = co_await gather_rows(p, column, indices);
  co_return ops::reshape<P>(picked, {P::shape(indices).at(0)});
}

// Scores of one KV head's query group against keys (T, d): (group, T) summed
// over the group -> (T).
template <Protocol P>
Task<typename P::Share> group_scores(P& p, const typename P::Share& queries,
                                     const typename P::Share& keys) {
  auto s = co_await p.matmul_trunc(queries, ops::transpose<P>(keys));  // (g, T)
  co_return P::apply(s, [](const RingTensor& t) { return ring_sum_second_last(t); });
}

// Column sums of attention rows [row_begin, row_end) of every group head:
// probs (g * T, T) -> (T), the accumulated attention a token received.
template <Protocol P>
typename P::Share accumulated_attention(const typename P::Share& probs, std::size_t group,
                                        std::size_t tokens, std::size_t row_begin) {
  return P::apply(probs, [=](const RingTensor& t) {
    RingTensor out = ring_zeros({tokens});
    for (std::size_t h = 0; h < group; ++h)
      for (std::size_t r = row_begin; r < tokens; ++r) {
        const Ring* row = t.data() + (h * tokens + r) * tokens;
        for (std::size_t c = 0; c < tokens; ++c) out(c) += row[c];
      }
    return out;
  });
}

// Selection of explicit secret indices (k) of one head's cache.
template <Protocol P>
Task<void> select_indices(P& p, const HeadCache<P>& cache, const typename P::Share& indices,
                          Selection<P>& out) {
  P pk = p.fork(), pv = p.fork();
  auto [k, v] = co_await when_all(gather_rows(pk, cache.keys, indices),
                                  gather_rows(pv, cache.values, indices));
  out.keys.push_back(std::move(k));
  out.values.push_back(std::move(v));
  out.positions.push_back(indices);
}

// Appends a one-head selection as the next head of `all`.
template <Protocol P>
void push_head(Selection<P>& all, Selection<P>&& one) {
  const std::size_t head = all.keys.size();
  if (one.picked(0)) {
    all.keys.emplace_back(), all.values.emplace_back(), all.positions.emplace_back();
    all.picks.resize(head + 1);
    all.picks[head] = std::move(one.picks[0]);
    return;
  }
  all.keys.push_back(std::move(one.keys.at(0)));
  all.values.push_back(std::move(one.values.at(0)));
  all.positions.push_back(std::move(one.positions.at(0)));
}

// Every KV head's selection at once: select_head(fork, j) runs for each head
// j on its own stream, concurrently, so a step's rounds do not grow with the
// head count. The one-head selections are joined in head order.
template <Protocol P, class SelectHead>
Task<Selection<P>> select_every_head(P& p, std::size_t heads, SelectHead select_head) {
  std::vector<P> forks;
  forks.reserve(heads);
  for (std::size_t j = 0; j < heads; ++j) forks.push_back(p.fork());
  std::vector<Task<Selection<P>>> tasks;
  tasks.reserve(heads);
  for (std::size_t j = 0; j < heads; ++j) tasks.push_back(select_head(forks[j], j));
  auto picked = co_await when_all(std::move(tasks));
  Selection<P> all;
  for (auto& one : picked) push_head(all, std::move(one));
  co_return all;
}

// A policy's refusal of a budget below its minimum, saying why and naming
// the minimum (each policy's static minimum_budget()).
inline Error budget_below_minimum(const std::string& policy, std::size_t budget, std::size_t minimum,
                                  const std::string& why) {
  return Error(ErrorCode::invalid_argument, policy + ": a budget of " + std::to_string(budget) +
                                                (budget == 1 ? " token " : " tokens ") + why + ": the minimum is " +
                                                std::to_string(minimum));
}

// The token count a budget fraction gives for a context, at least `floor`.
inline std::size_t budget_tokens(double fraction, std::size_t context, std::size_t floor = 8) {
  return std::max(floor, static_cast<std::size_t>(std::llround(fraction * static_cast<double>(context))));
}

}  // namespace mpcache::kv
