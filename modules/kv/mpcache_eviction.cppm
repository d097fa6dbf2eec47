// MPCache's look-once static eviction at prefill (members of MpCache<P>,
// declared in :mpcache): the prompt's accumulated attention ranks its
// tokens, the top keep_ratio stay in position order, moved into the cluster
// lists by one compaction matmul, and the prompt's complete clusters are
// summarised; start_evicted sets up the same state without running it.
export module mpcache.kv:mpcache_eviction;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :mpcache;

namespace mpcache::kv {

template <Protocol P>
Task<void> MpCache<P>::after_prefill(P& p, const PrefillView<P>& view) {
  const std::size_t t = view.tokens, heads = state_[view.layer].size();
  const std::size_t keep = kept_tokens(t);
  const std::size_t window = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(o_.window_ratio * double(t))));
  const std::optional<std::size_t> owner = o_.owner_of(view.layer);
  const bool shared = owner.has_value();
  auto& layer = state_[view.layer];
  for (const auto& hc : *view.cache)
    if (hc.first != 0)
      throw Error(ErrorCode::invalid_argument, "MPCache: the prompt's look needs all its tokens; the cache starts at token " +
                                                   std::to_string(hc.first));
  if (keep == t) {
    for (std::size_t j = 0; j < heads; ++j) layer[j].list.append_rows(p, (*view.cache)[j], 0, t);
  } else {
    std::vector<Share> compaction;
    if (shared) {
      for (std::size_t j = 0; j < heads; ++j) {
        const auto& own = state_[*owner][j].compaction;
        if (!own) throw Error(ErrorCode::invalid_argument, "MPCache: a sharing layer before its owner");
        compaction.push_back(*own);
      }
    } else {
      compaction = co_await eviction(p, view, keep, window);
    }
    std::vector<P> forks;
    forks.reserve(heads);
    std::vector<Task<Share>> tasks;
    for (std::size_t j = 0; j < heads; ++j) forks.push_back(p.fork());
    for (std::size_t j = 0; j < heads; ++j) tasks.push_back(compact(forks[j], compaction[j], (*view.cache)[j]));
    auto kept = co_await when_all(std::move(tasks));
    const std::size_t d = P::shape((*view.cache)[0].keys).at(1);
    for (std::size_t j = 0; j < heads; ++j) {
      layer[j].list.append(p, ops::slice_last<P>(kept[j], 0, d), ops::slice_last<P>(kept[j], d, 2 * d),
                           ops::reshape<P>(ops::slice_last<P>(kept[j], 2 * d, 2 * d + 1), {keep}));
      if (!shared && o_.is_owner(view.layer)) layer[j].compaction = std::move(compaction[j]);
    }
    bool later_sharer = false;  // of the same owner
    for (std::size_t l = view.layer + 1; l < state_.size(); ++l) later_sharer = later_sharer || o_.owner_of(l) == owner;
    if (shared && !later_sharer)  // no later layer needs the owner's matrices
      for (auto& own : state_[*owner]) own.compaction.reset();
  }
  co_await after_eviction(p, view.layer, t);
}

template <Protocol P>
Task<void> MpCache<P>::start_evicted(P& p, std::size_t layer, std::size_t prompt_tokens,
                                     const std::vector<HeadCache<P>>& kept, const std::vector<Share>& positions) {
  auto& heads = state_.at(layer);
  if (kept.size() != heads.size() || positions.size() != heads.size())
    throw Error(ErrorCode::invalid_argument, "MPCache: kept rows for " + std::to_string(kept.size()) +
                                                 " heads, the layer has " + std::to_string(heads.size()));
  for (std::size_t j = 0; j < heads.size(); ++j) {
    if (P::shape(kept[j].keys).at(0) != kept_tokens(prompt_tokens))
      throw Error(ErrorCode::invalid_argument, "MPCache: " + std::to_string(P::shape(kept[j].keys).at(0)) +
                                                   " kept rows, static eviction keeps " +
                                                   std::to_string(kept_tokens(prompt_tokens)));
    heads[j].list.append(p, kept[j].keys, kept[j].values, positions[j]);
  }
  co_await after_eviction(p, layer, prompt_tokens);
}


// The prompt's kept rows are in the lists: summarise its complete clusters
// (not in a sharing layer, unless it reranks: else it never scores its own).
template <Protocol P>
Task<void> MpCache<P>::after_eviction(P& p, std::size_t layer_index, std::size_t prompt_tokens) {
  auto& layer = state_[layer_index];
  for (auto& st : layer) {
    st.prompt_tokens = prompt_tokens;
    st.kept_count = st.list.length;
  }
  if (!ranks_own(layer_index)) co_return;
  std::vector<P> forks;
  forks.reserve(layer.size());
  std::vector<Task<void>> tasks;
  for (std::size_t j = 0; j < layer.size(); ++j) forks.push_back(p.fork());
  for (std::size_t j = 0; j < layer.size(); ++j) tasks.push_back(summarise(forks[j], layer[j], layer[j].list.full()));
  co_await when_all(std::move(tasks));
}

// (keep, T) 0/1 compaction matrices, per KV head, in position order.
template <Protocol P>
auto MpCache<P>::eviction(P& p, const PrefillView<P>& view, std::size_t keep, std::size_t window)
    -> Task<std::vector<Share>> {
  const std::size_t t = view.tokens, heads = view.probs->size();
  std::vector<Share> out;
  std::optional<Share> scores;  // (heads, T)
  for (std::size_t j = 0; j < heads; ++j) {
    auto row = ops::reshape<P>(accumulated_attention<P>((*view.probs)[j], view.group, t, t - window), {1, t});
    scores = scores ? ops::stack_rows<P>(*scores, row) : row;
  }
  // The kept test below compares sort keys with the k-th one's: the scores
  // must be codes, so that the keys order the tokens as the top-k did.
  scores = ops::detail::fixed_point_codes(p, *scores);
  // Accumulated attention sums at most t probabilities: |score| < 2t
  // (twice, for the approximations' error), so comparisons need only
  // frac + log2(t) + 3 bits, and the keys log2(t) more.
  const int width = ops::comparison_width(p.frac_bits(), ops::ceil_log2(t) + 1);
  auto top = co_await ops::topk(p, *scores, keep, ops::TopKMethod::automatic, {}, width);
  RingTensor iota = RingTensor::from_shape({heads, t});
  for (std::size_t i = 0; i < iota.size(); ++i) iota.data()[i] = i % t;
  const auto keys = ops::detail::sort_key(p, *scores, ops::public_share(p, *scores, iota), t);
  const auto kth = ops::detail::sort_key(p, ops::slice_last<P>(top.values, keep - 1, keep),
                                         ops::slice_last<P>(top.indices, keep - 1, keep), t);
  const auto kth_each = ops::broadcast_last<P>(kth, t);
  auto dropped = co_await ops::less_than(p, keys, kth_each,
                                         ops::detail::value_width(width, t) + ops::detail::key_shift(t));  // (heads, T)
  // Slot of kept token i: (kept tokens up to i) - 1; a dropped token gets a
  // slot past the end: (prefix - 1) + (keep + 1) * dropped, in [keep, 2 keep].
  auto kept = p.add_public(p.neg(dropped), ring_filled({heads, t}, 1));
  auto prefix = P::apply(kept, [t](const RingTensor& x) {
    RingTensor out = x;
    for (std::size_t r = 0; r < out.size(); r += t)
      for (std::size_t c = 1; c < t; ++c) out.data()[r + c] += out.data()[r + c - 1];
    return out;
  });
  auto slot = p.add(p.add_public(prefix, ring_filled({heads, t}, Ring(0) - 1)),
                    p.mul_public(dropped, ring_filled({heads, t}, Ring(keep + 1))));
  auto hot = co_await ops::one_hot(p, slot, keep, ops::ceil_log2(2 * keep + 1));  // (heads, T, keep)
  for (std::size_t j = 0; j < heads; ++j) {
    auto head = P::apply(hot, [=](const RingTensor& x) {
      RingTensor m = RingTensor::from_shape({keep, t});
      for (std::size_t i = 0; i < t; ++i)
        for (std::size_t r = 0; r < keep; ++r) m(r, i) = x.data()[(j * t + i) * keep + r];
      return m;
    });
    out.push_back(std::move(head));
  }
  co_return out;
}

// Kept rows of one head's prompt: (keep, 2d + 1) = [keys | values | position].
template <Protocol P>
auto MpCache<P>::compact(P& p, const Share& matrix, const HeadCache<P>& hc) -> Task<Share> {
  const std::size_t t = P::shape(hc.keys).at(0);
  auto table = ops::concat_last<P>(ops::concat_last<P>(hc.keys, hc.values),
                                   ops::reshape<P>(public_range(p, hc.keys, 0, t), {t, 1}));
  co_return co_await p.matmul(matrix, table);
}

}  // namespace mpcache::kv
