// InfLLM (Xiao et al. 2024): attention sinks, a local window, and memory
// blocks of `block` adjacent tokens, each represented by its `reps` most
// representative keys (the ones that received the most attention from the
// queries that followed them within the local window). A block's relevance
// is q . sum(representative keys); the top blocks are gathered whole.
// Prompt blocks take their representative scores from the prefill attention
// (rows from the block start to block end + local window); blocks formed
// while decoding take them from the attention observed at decode steps.
// Blocks are gathered like clusters (:clusters, ops::cluster_gather).
export module mpcache.kv:infllm;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :policy;
import :selection;
import :clusters;

export namespace mpcache::kv {

template <Protocol P>
class InfLlm {
 public:
  using Share = typename P::Share;
  explicit InfLlm(std::size_t budget, std::size_t block = 16, std::size_t reps = 4, std::size_t sinks = 4)
      : budget_(budget), block_(block), reps_(std::min(reps, block)), sinks_(sinks),
        local_(std::max<std::size_t>(block, budget / 4)) {
    if (budget_ < minimum_budget(block, sinks))
      throw budget_below_minimum("InfLLM", budget_, minimum_budget(block, sinks),
                                 "is below " + std::to_string(sinks_) + " sinks, a local window of " +
                                     std::to_string(local_) + ", one block of " + std::to_string(block_) + " and " +
                                     std::to_string(block_ - 1) + " tokens of a block not yet full");
  }
  // The smallest budget the constructor takes: sinks + local window + one
  // block + a block not yet full, where the window grows with the budget
  // (budget / 4, at least a block).
  static std::size_t minimum_budget(std::size_t block = 16, std::size_t sinks = 4) {
    std::size_t budget = sinks + 3 * block - 1;
    while (budget < sinks + std::max(block, budget / 4) + 2 * block - 1) ++budget;
    return budget;
  }
  std::string name() const { return "infllm"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }

  Task<void> after_prefill(P&, const PrefillView<P>& view) {
    const std::size_t t = view.tokens, g = view.group, local = local_;
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j) {
      State& st = state_[view.layer][j];
      const std::size_t blk = block_, s0 = sinks_;
      // Representative score of column c: attention from rows
      // [block start, block end + local) of its block.
      st.score = P::apply((*view.probs)[j], [=](const RingTensor& pr) {
        RingTensor out = ring_zeros({t});
        for (std::size_t c = s0; c < t; ++c) {
          const std::size_t b0 = s0 + (c - s0) / blk * blk, r1 = std::min(t, b0 + blk + local);
          for (std::size_t h = 0; h < g; ++h)
            for (std::size_t r = c; r < r1; ++r) out(c) += pr((h * t + r), c);
        }
        return out;
      });
    }
    co_return;
  }

  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    const std::size_t memory_end = t - local_;                    // tokens before the local window
    const std::size_t blocks = (memory_end - sinks_) / block_;   // complete memory blocks
    const std::size_t loose_begin = sinks_ + blocks * block_;    // left the window, block not full yet
    const std::size_t k = std::min(blocks, (budget_ - sinks_ - local_ - (block_ - 1)) / block_);
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      State& st = state_[step.layer][j];
      const auto& hc = (*step.cache)[j];
      st.score = detail::pad_to(p, st.score, t);
      co_await summarise(p, st, hc, blocks);
      auto k_sel = ops::rows<P>(hc.keys, 0, sinks_), v_sel = ops::rows<P>(hc.values, 0, sinks_);
      auto pos = public_range(p, hc.keys, 0, sinks_);
      if (k > 0) {
        auto q = P::apply((*step.queries)[j], [](const RingTensor& x) { return ring_sum_second_last(x); });
        const std::size_t d = P::shape(hc.keys).at(1);
        auto rel = co_await p.matmul_trunc(ops::reshape<P>(q, {1, d}), ops::transpose<P>(*st.summary));
        auto top = co_await ops::topk(p, ops::reshape<P>(rel, {blocks}), k);
        auto hot = co_await ops::one_hot(p, top.indices, blocks);  // (k, blocks)
        auto table = token_blocks<P>(ops::rows<P>(hc.keys, sinks_, loose_begin), ops::rows<P>(hc.values, sinks_, loose_begin),
                                     public_range(p, hc.keys, sinks_, loose_begin), block_);
        auto picked = co_await gather_blocks(p, hot, table);
        k_sel = ops::stack_rows<P>(k_sel, picked.keys[0]);
        v_sel = ops::stack_rows<P>(v_sel, picked.values[0]);
        pos = ops::concat_last<P>(pos, picked.positions[0]);
      }
      detail::append_rows(p, hc, loose_begin, t, k_sel, v_sel, pos);
      st.last = pos;
      s.keys.push_back(std::move(k_sel));
      s.values.push_back(std::move(v_sel));
      s.positions.push_back(std::move(pos));
    }
    co_return s;
  }

  // Attention received at decode steps feeds the representative scores of
  // blocks that form later.
  // Its selection follows the attention it observed: a speculative step's
  // row takes the row before's state of each layer (kv::LayerAdopting).
  void adopt_layer(const InfLlm& source, std::size_t layer) { state_.at(layer) = source.state_.at(layer); }
  bool selects_from_observed() const noexcept { return true; }
  Task<void> observe(P& p, const StepView<P>& step, const std::vector<Share>& probs) {
    const std::size_t t = step.position + 1;
    for (std::size_t j = 0; j < probs.size(); ++j) {
      State& st = state_[step.layer][j];
      st.score = detail::pad_to(p, st.score, t);
      const std::size_t n = P::shape(probs[j]).back();
      auto positions = n == t ? public_range(p, st.score, 0, t) : *st.last;
      st.score = co_await detail::scatter_add(p, st.score, probs[j], positions);
    }
  }

 private:
  struct State {
    Share score;                  // representative score per position
    std::optional<Share> summary; // (blocks, d): sum of each block's representative keys
    std::size_t summarised = 0;
    std::optional<Share> last;
  };

  Task<void> summarise(P& p, State& st, const HeadCache<P>& hc, std::size_t blocks) {
    if (blocks <= st.summarised) co_return;
    const std::size_t n = blocks - st.summarised, b0 = sinks_ + st.summarised * block_;
    auto scores = ops::reshape<P>(ops::slice_last<P>(st.score, b0, b0 + n * block_), {n, block_});
    auto top = co_await ops::topk(p, scores, reps_);  // (n, reps) offsets within each block
    // Absolute positions: block start + offset (public offsets per row).
    RingTensor starts = RingTensor::from_shape({n, reps_});
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t r = 0; r < reps_; ++r) starts(i, r) = b0 + i * block_;
    auto positions = ops::reshape<P>(p.add_public(top.indices, starts), {n * reps_});
    auto rep_keys = co_await gather_rows(p, hc.keys, positions);  // (n * reps, d)
    const std::size_t d = P::shape(rep_keys).at(1);
    auto summed = P::apply(rep_keys, [=, reps = reps_](const RingTensor& x) {
      return ring_sum_second_last(ring_reshape(x, {n, reps, d}));
    });
    st.summary = st.summary ? ops::stack_rows<P>(*st.summary, summed) : summed;
    st.summarised = blocks;
  }

  std::size_t budget_, block_, reps_, sinks_, local_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
