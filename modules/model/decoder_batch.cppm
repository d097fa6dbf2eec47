// The decoder's decode step (members of Decoder<P>, declared in :decoder),
// for a batch of sequences at once (continuous batching); a single decode
// is a batch of one. The batch's rows share the norms, projections, MLP and
// LM head; each sequence's attention runs over its own cache and policy,
// concurrently. Policies that can rank their clusters early
// (kv::EarlyRanking) do so while the norm runs.
export module mpcache.model:decoder_batch;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import :decoder;

namespace mpcache {

// decode_batch: the step's rows embedded together, then every layer for all
// sequences (decode_layer), then the LM head of the stacked rows.
template <Protocol P>
template <class Pol>
  requires kv::Policy<Pol, P>
auto Decoder<P>::decode_batch(P& p, std::vector<BatchSlot<Pol>> slots) -> Task<Share> {
  check_batch(slots);
  Decoder& lead = *slots.front().decoder;
  Share hot = slots.front().one_hot;
  for (std::size_t i = 1; i < slots.size(); ++i) hot = ops::stack_rows<P>(hot, slots[i].one_hot);
  auto h = co_await lead.embed(p, hot, batch_positions(slots));
  for (std::size_t l = 0; l < lead.c_.num_layers; ++l) h = co_await decode_layer(p, slots, l, h);
  for (auto& slot : slots) slot.decoder->length_ += slot.earlier + 1;
  co_return co_await lead.head(p, h);
}

template <Protocol P>
template <class Pol>
void Decoder<P>::check_batch(const std::vector<BatchSlot<Pol>>& slots) {
  if (slots.empty()) throw Error(ErrorCode::invalid_argument, "a decode batch of no sequences");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto& slot = slots[i];
    const std::string which = "decode batch: slot " + std::to_string(i);
    if (!slot.decoder || !slot.policy) throw Error(ErrorCode::invalid_argument, which + " has no decoder or no policy");
    if (&slot.decoder->w_ != &slots.front().decoder->w_)
      throw Error(ErrorCode::invalid_argument, which + " runs other weights than slot 0");
    for (std::size_t j = 0; j < i; ++j)
      if (slots[j].decoder == slot.decoder || slots[j].policy == slot.policy)
        throw Error(ErrorCode::invalid_argument, which + " repeats slot " + std::to_string(j) +
                                                     "'s sequence (its decoder or policy)");
    slot.decoder->check_decode();
    if (slot.earlier > 0) {
      // The rows before it: the same sequence's, one after another, at the same start.
      if (slot.earlier > i || slots[i - 1].earlier + 1 != slot.earlier ||
          slots[i - 1].decoder->length_ != slot.decoder->length_)
        throw Error(ErrorCode::invalid_argument, which + " follows " + std::to_string(slot.earlier) +
                                                     " earlier rows of its step that the slots before it do not hold");
      if (slot.decoder->length_ + slot.earlier >= slot.decoder->c_.max_positions)
        throw Error(ErrorCode::invalid_argument, "decode past max_position_embeddings");
    }
    slot.decoder->check_one_hot(slot.one_hot);
    if (P::shape(slot.one_hot)[0] != 1)
      throw Error(ErrorCode::invalid_argument,
                  "decode of " + std::to_string(P::shape(slot.one_hot)[0]) + " tokens at once");
  }
}

template <Protocol P>
template <class Pol>
std::vector<std::size_t> Decoder<P>::batch_positions(const std::vector<BatchSlot<Pol>>& slots) {
  std::vector<std::size_t> positions;
  for (const auto& slot : slots) positions.push_back(slot.decoder->length_ + slot.earlier);
  return positions;
}

// Runs `body(p_i, i)` for each sequence i of a batch concurrently, each on
// a fork of p; a batch of one runs on p itself, as a decode always did.
template <Protocol P>
template <class T, class Body>
auto Decoder<P>::per_sequence(P& p, std::size_t count, Body body) -> Task<Results<T>> {
  if (count == 1) {
    Results<T> one;
    if constexpr (std::is_void_v<T>) {
      co_await body(p, 0);
      one.emplace_back();
    } else {
      one.push_back(co_await body(p, 0));
    }
    co_return one;
  }
  std::vector<P> forks;
  forks.reserve(count);
  for (std::size_t i = 0; i < count; ++i) forks.push_back(p.fork());
  std::vector<Task<T>> tasks;
  for (std::size_t i = 0; i < count; ++i) tasks.push_back(body(forks[i], i));
  co_return co_await when_all(std::move(tasks));
}

// A decode step's layer for every sequence of a batch: the stacked rows'
// norm and projections (policies that can rank meanwhile), then per
// sequence its policy's selection, attention over it and the policy's look
// at the weights; then the stacked output projection and MLP. The next
// layer's prefetch (index sharing) runs alongside all but the selection.
template <Protocol P>
template <class Pol>
auto Decoder<P>::decode_layer(P& p, std::vector<BatchSlot<Pol>>& slots, std::size_t layer, const Share& h_in)
    -> Task<Share> {
  Decoder& lead = *slots.front().decoder;
  const auto& lw = lead.layer_weights(layer);
  const std::size_t batch = slots.size(), g = lead.c_.num_heads / lead.c_.num_kv_heads;
  const std::vector<std::size_t> positions = batch_positions(slots);
  auto row = [&](const Share& x, std::size_t i) { return batch == 1 ? x : ops::rows<P>(x, i, i + 1); };

  std::vector<Share> h_rows(batch);  // alive while the rankers run
  std::vector<Ranker> rankers;
  for (std::size_t i = 0; i < batch; ++i) {
    Decoder& d = *slots[i].decoder;
    if (!d.ranks_early(*slots[i].policy, layer)) continue;
    h_rows[i] = row(h_in, i);
    rankers.push_back([&d, &slot = slots[i], &h = h_rows[i], layer](P& pe) {
      return d.rank_early(pe, *slot.policy, layer, h, d.length_ + slot.earlier);
    });
  }
  auto [qr, kr, v] = co_await lead.project_rotated(p, layer, h_in, positions, rankers);

  std::vector<std::vector<Share>> queries(batch);
  std::vector<kv::StepView<P>> views;
  views.reserve(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    Decoder& d = *slots[i].decoder;
    // This row's key and value, after those of its step's earlier rows.
    const std::size_t from = i - slots[i].earlier;
    auto step_rows = [&](const Share& x) { return batch == 1 ? x : ops::rows<P>(x, from, i + 1); };
    d.keep_rows(*slots[i].policy, layer, step_rows(kr), step_rows(v), /*decode=*/true);
    queries[i] = d.query_groups(row(qr, i));
    views.push_back(kv::StepView<P>{layer, positions[i], g, &queries[i], &d.cache_[layer]});
  }
  // A speculative step's later rows: the row before is the slot before.
  // Under a policy that selects by the attention it observed, a row waits
  // for the row before it to attend (and observe) in this layer.
  std::vector<bool> waits(batch, false);
  for (std::size_t i = 0; i < batch; ++i)
    if (slots[i].earlier > 0) {
      views[i].previous_queries = &queries[i - 1];
      waits[i] = kv::OptionalMembers<P>::selects_from_observed(*slots[i].policy);
    }
  std::vector<Share> attended;
  std::vector<kv::Selection<P>> selections;
  if (std::find(waits.begin(), waits.end(), true) != waits.end()) {
    attended = co_await attend_in_turn(p, slots, views, waits, layer);
  } else {
    // Policies tag their own summaries, scores and top-k; the rest of a
    // selection (copying or gathering rows) counts as gathering.
    auto scope = cost_scope(p, CostTag::gather);
    selections = co_await per_sequence<kv::Selection<P>>(
        p, batch, [&](P& ps, std::size_t i) { return slots[i].policy->select(ps, views[i]); });
  }
  auto rest = [&](P& px) -> Task<Share> {
    if (attended.empty())
      attended = co_await per_sequence<Share>(px, batch, [&](P& pa, std::size_t i) {
        return slots[i].decoder->attend(pa, *slots[i].policy, views[i], selections[i]);
      });
    Share joined = attended[0];
    for (std::size_t i = 1; i < batch; ++i) joined = ops::stack_rows<P>(joined, attended[i]);
    auto after = px.add(h_in, co_await lead.affine(px, joined, lw.wo, lw.bo));
    co_return co_await lead.mlp_block(px, layer, after);
  };
  if constexpr (kv::Prefetching<Pol, P>) {
    // The next layer's selection may need only this step's indices
    // (index sharing): let it gather while this layer finishes. A policy
    // that ranks ahead picks for this layer's next step instead, from this
    // step's queries (its own summaries are part of that ranking).
    P pr = p.fork(), pf = p.fork();
    auto prefetch_scope = cost_scope(pf, CostTag::gather);
    std::vector<kv::RankView<P>> ahead;  // alive while the rankers run
    ahead.reserve(batch);
    for (std::size_t i = 0; i < batch; ++i) ahead.push_back(kv::RankView<P>{layer, positions[i] + 1, g, &queries[i]});
    auto prefetch = per_sequence<void>(pf, batch, [&](P& pq, std::size_t i) {
      if (kv::OptionalMembers<P>::ranks_ahead(*slots[i].policy, layer))
        return kv::OptionalMembers<P>::rank(*slots[i].policy, pq, ahead[i]);
      return slots[i].policy->prefetch(pq, layer + 1, positions[i]);
    });
    auto [out, none] = co_await when_all(rest(pr), std::move(prefetch));
    (void)none;
    co_return out;
  } else {
    co_return co_await rest(p);
  }
}

// Selection and attention of a layer where some rows wait for the row
// before (`waits`): each run of a sequence's rows goes one row after
// another, a waiting row first adopting the row before's policy state of
// this layer (kv::LayerAdopting); runs of different sequences, and rows
// that wait for nothing, go concurrently. A run of K+1 rows costs K+1
// times one row's selection and attention rounds in every layer.
template <Protocol P>
template <class Pol>
auto Decoder<P>::attend_in_turn(P& p, std::vector<BatchSlot<Pol>>& slots, const std::vector<kv::StepView<P>>& views,
                                const std::vector<bool>& waits, std::size_t layer) -> Task<std::vector<Share>> {
  std::vector<std::size_t> run_starts;
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (!waits[i]) run_starts.push_back(i);
  std::vector<Share> attended(slots.size());
  auto run = [&](P& pr, std::size_t r) -> Task<void> {
    const std::size_t end = r + 1 < run_starts.size() ? run_starts[r + 1] : slots.size();
    for (std::size_t i = run_starts[r]; i < end; ++i) {
      if (waits[i]) kv::OptionalMembers<P>::adopt_layer(*slots[i].policy, *slots[i - 1].policy, layer);
      kv::Selection<P> selection;
      {
        auto scope = cost_scope(pr, CostTag::gather);  // as in decode_layer
        selection = co_await slots[i].policy->select(pr, views[i]);
      }
      attended[i] = co_await slots[i].decoder->attend(pr, *slots[i].policy, views[i], selection);
    }
  };
  co_await per_sequence<void>(p, run_starts.size(), run);
  co_return attended;
}

// Early ranking (kv::EarlyRanking) needs q up to a positive factor: LLaMA
// layers (RMSNorm, no query bias) give it as h wq_ranking.
template <Protocol P>
template <class Pol>
bool Decoder<P>::ranks_early(const Pol& policy, std::size_t layer) const {
  const auto& lw = layer_weights(layer);
  return early_ranking_ && lw.wq_ranking && !lw.bq && !lw.input_norm_bias &&
         kv::OptionalMembers<P>::ranks_early(policy, layer);
}

// h wq_ranking = q rms(h) / 16 after RoPE: two rounds (the projection,
// RoPE's truncation) where the norm takes sixteen; then the policy's rank.
template <Protocol P>
template <class Pol>
auto Decoder<P>::rank_early(P& p, Pol& policy, std::size_t layer, const Share& h_in, std::size_t position)
    -> Task<void> {
  std::vector<Share> queries;
  {
    auto scope = cost_scope(p, CostTag::similarity);
    queries = query_groups(co_await rope(p, co_await p.matmul_trunc(h_in, *layer_weights(layer).wq_ranking),
                                         {position}, c_.num_heads));
  }
  auto scope = cost_scope(p, CostTag::gather);  // as select(): policies tag their own scores and top-k
  const kv::RankView<P> view{layer, position, c_.num_heads / c_.num_kv_heads, &queries};
  co_await kv::OptionalMembers<P>::rank(policy, p, view);
}

}  // namespace mpcache
