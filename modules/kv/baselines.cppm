// The baseline policies MPCache is measured against, each at a public, fixed
// budget B = tokens attended per KV head per step (the current token
// included). Below the budget every policy attends to the whole cache.
//   FullCache      everything
//   StreamingLlm   attention sinks + recent window (Xiao et al. 2023)
//   H2O            recent window + heavy hitters by accumulated attention,
//                  greedy eviction (Zhang et al. 2023)
//   Tova           keeps the B-1 tokens the current query attends most,
//                  evicting one per step (Oren et al. 2024)
//   SnapKV         prefill observation window votes, max-pooled, pick the
//                  prefix once; recent window after (Li et al. 2024)
//   LongCache      sinks + recent + top tokens by cosine similarity q.k/|k|
// (Quest, with its page bounds, lives with the other cluster policies in
// :clusters.)
// Everything secret stays secret: scores, indices and gathers use the
// Protocol ops (top-k, one-hot, matmul); only sizes and public positions
// (sinks, windows) are in the clear.
module;
#include "prelude.hpp"
export module mpcache.kv:baselines;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import mpcache.ops;
import :policy;

export namespace mpcache::kv {

namespace detail {

template <Protocol P>
Selection<P> whole_cache(const P& p, const StepView<P>& step) {
  Selection<P> s;
  const std::size_t t = step.position + 1;
  for (const auto& hc : *step.cache) {
    s.keys.push_back(hc.keys);
    s.values.push_back(hc.values);
    s.positions.push_back(public_range(p, hc.keys, 0, t));
  }
  return s;
}

// Public rows [begin, end) appended to a selection head.
template <Protocol P>
void append_rows(const P& p, const HeadCache<P>& hc, std::size_t begin, std::size_t end,
                 typename P::Share& keys, typename P::Share& values, typename P::Share& positions) {
  keys = stack_rows<P>(keys, rows<P>(hc.keys, begin, end));
  values = stack_rows<P>(values, rows<P>(hc.values, begin, end));
  positions = ops::concat_last<P>(positions, public_range(p, hc.keys, begin, end));
}

// Elements [begin, end) of a vector share.
template <Protocol P>
typename P::Share elements(const typename P::Share& v, std::size_t begin, std::size_t end) {
  return ops::slice_last<P>(v, begin, end);
}

// Sum over the group rows: (g, n) -> (n).
template <Protocol P>
typename P::Share sum_group(const typename P::Share& probs) {
  return P::apply(probs, [](const RingTensor& t) { return ring_sum_second_last(t); });
}

// Zero-pad a vector share to length n (new tokens start with score 0).
template <Protocol P>
typename P::Share pad_to(const P& p, const typename P::Share& v, std::size_t n) {
  const std::size_t have = P::shape(v).at(0);
  if (have >= n) return v;
  auto zeros = p.add_public(P::apply(v, [&](const RingTensor&) { return ring_zeros({n - have}); }),
                            ring_zeros({n - have}));
  return ops::concat_last<P>(v, zeros);
}

// score (T) += probs summed over the group, scattered to their positions.
template <Protocol P>
Task<typename P::Share> scatter_add(P& p, const typename P::Share& score,
                                    const typename P::Share& probs, const typename P::Share& positions) {
  const std::size_t t = P::shape(score).at(0), n = P::shape(positions).at(0);
  auto hot = co_await ops::one_hot(p, positions, t);  // (n, T)
  auto row = ops::reshape<P>(sum_group<P>(probs), {1, n});
  auto add = co_await p.matmul(row, hot);  // (1, T): 0/1 weights need no truncation
  co_return p.add(score, ops::reshape<P>(add, {t}));
}

}  // namespace detail

template <Protocol P>
class FullCache {
 public:
  std::string name() const { return "full"; }
  void reset(std::size_t, std::size_t) {}
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) { co_return detail::whole_cache(p, step); }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }
};

template <Protocol P>
class StreamingLlm {
 public:
  explicit StreamingLlm(std::size_t budget, std::size_t sinks = 4) : budget_(budget), sinks_(sinks) {
    if (budget_ <= sinks_) throw Error(ErrorCode::invalid_argument, "StreamingLLM: budget must exceed the sinks");
  }
  std::string name() const { return "streaming_llm"; }
  void reset(std::size_t, std::size_t) {}
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    Selection<P> s;
    for (const auto& hc : *step.cache) {
      auto k = rows<P>(hc.keys, 0, sinks_), v = rows<P>(hc.values, 0, sinks_);
      auto pos = public_range(p, hc.keys, 0, sinks_);
      detail::append_rows(p, hc, t - (budget_ - sinks_), t, k, v, pos);
      s.keys.push_back(std::move(k));
      s.values.push_back(std::move(v));
      s.positions.push_back(std::move(pos));
    }
    co_return s;
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  std::size_t budget_, sinks_;
};

template <Protocol P>
class H2O {
 public:
  // heavy_fraction of the budget goes to heavy hitters, the rest to the recent window.
  explicit H2O(std::size_t budget, double heavy_fraction = 0.5)
      : budget_(budget),
        heavy_(std::max<std::size_t>(1, static_cast<std::size_t>(heavy_fraction * double(budget)))) {
    if (heavy_ >= budget_) throw Error(ErrorCode::invalid_argument, "H2O: heavy part must leave a recent window");
  }
  std::string name() const { return "h2o"; }
  void reset(std::size_t layers, std::size_t heads) {
    state_.assign(layers, std::vector<State>(heads));
  }
  Task<void> after_prefill(P&, const PrefillView<P>& view) {
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j)
      state_[view.layer][j].score = accumulated_attention<P>((*view.probs)[j], view.group, view.tokens, 0);
    co_return;
  }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    const std::size_t recent_start = t - (budget_ - heavy_);
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      State& st = state_[step.layer][j];
      const auto& hc = (*step.cache)[j];
      st.score = detail::pad_to(p, st.score, t);
      if (!st.heavy) {  // first eviction: heavy hitters among everything before the window
        auto top = co_await ops::topk(p, detail::elements<P>(st.score, 0, recent_start), heavy_);
        st.heavy = std::move(top.indices);
      } else if (recent_start > st.window_start) {  // tokens that left the window compete
        auto cand = ops::concat_last<P>(*st.heavy, public_range(p, st.score, st.window_start, recent_start));
        auto cand_scores = co_await gather_values(p, st.score, cand);
        auto top = co_await ops::topk(p, cand_scores, heavy_);
        st.heavy = co_await gather_values(p, cand, top.indices);
      }
      st.window_start = recent_start;
      Selection<P> one;
      co_await select_indices(p, hc, *st.heavy, one);
      detail::append_rows(p, hc, recent_start, t, one.keys[0], one.values[0], one.positions[0]);
      s.keys.push_back(std::move(one.keys[0]));
      s.values.push_back(std::move(one.values[0]));
      s.positions.push_back(std::move(one.positions[0]));
    }
    co_return s;
  }
  Task<void> observe(P& p, const StepView<P>& step, const std::vector<typename P::Share>& probs) {
    const std::size_t t = step.position + 1;
    for (std::size_t j = 0; j < probs.size(); ++j) {
      State& st = state_[step.layer][j];
      st.score = detail::pad_to(p, st.score, t);
      const std::size_t n = P::shape(probs[j]).back();
      auto positions = n == t ? public_range(p, st.score, 0, t) : last_positions(p, st, t);
      st.score = co_await detail::scatter_add(p, st.score, probs[j], positions);
    }
  }

 private:
  struct State {
    typename P::Share score;                  // accumulated attention per position
    std::optional<typename P::Share> heavy;   // secret positions of the heavy hitters
    std::size_t window_start = 0;
  };
  typename P::Share last_positions(const P& p, const State& st, std::size_t t) const {
    return ops::concat_last<P>(*st.heavy, public_range(p, st.score, st.window_start, t));
  }
  std::size_t budget_, heavy_;
  std::vector<std::vector<State>> state_;
};

template <Protocol P>
class Tova {
 public:
  explicit Tova(std::size_t budget) : budget_(budget) {
    if (budget_ < 2) throw Error(ErrorCode::invalid_argument, "TOVA: budget below 2");
  }
  std::string name() const { return "tova"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    if (view.tokens < budget_) co_return;
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j) {
      auto last = accumulated_attention<P>((*view.probs)[j], view.group, view.tokens, view.tokens - 1);
      auto top = co_await ops::topk(p, last, budget_ - 1);
      state_[view.layer][j].kept = std::move(top.indices);
    }
  }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      State& st = state_[step.layer][j];
      const auto& hc = (*step.cache)[j];
      if (!st.kept) {
        s.keys.push_back(hc.keys);
        s.values.push_back(hc.values);
        s.positions.push_back(public_range(p, hc.keys, 0, t));
      } else {
        Selection<P> one;
        co_await select_indices(p, hc, *st.kept, one);
        detail::append_rows(p, hc, t - 1, t, one.keys[0], one.values[0], one.positions[0]);
        s.keys.push_back(std::move(one.keys[0]));
        s.values.push_back(std::move(one.values[0]));
        s.positions.push_back(std::move(one.positions[0]));
      }
      st.last = s.positions.back();
    }
    co_return s;
  }
  Task<void> observe(P& p, const StepView<P>& step, const std::vector<typename P::Share>& probs) {
    for (std::size_t j = 0; j < probs.size(); ++j) {
      State& st = state_[step.layer][j];
      const std::size_t n = P::shape(probs[j]).back();
      if (n < budget_) continue;  // still below the budget: nothing to evict
      auto top = co_await ops::topk(p, detail::sum_group<P>(probs[j]), budget_ - 1);
      st.kept = co_await gather_values(p, *st.last, top.indices);
    }
  }

 private:
  struct State {
    std::optional<typename P::Share> kept;  // secret positions, budget - 1 of them
    std::optional<typename P::Share> last;  // positions of the last selection
  };
  std::size_t budget_;
  std::vector<std::vector<State>> state_;
};

template <Protocol P>
class SnapKv {
 public:
  explicit SnapKv(std::size_t budget, std::size_t window = 32, std::size_t kernel = 7)
      : budget_(budget), window_(std::min(window, budget / 2)), kernel_(kernel) {
    if (window_ == 0) throw Error(ErrorCode::invalid_argument, "SnapKV: budget too small");
  }
  std::string name() const { return "snapkv"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }
  Task<void> after_prefill(P& p, const PrefillView<P>& view) {
    const std::size_t t = view.tokens, prefix = budget_ - window_;
    if (t <= budget_) co_return;
    for (std::size_t j = 0; j < state_[view.layer].size(); ++j) {
      auto votes = accumulated_attention<P>((*view.probs)[j], view.group, t, t - window_);
      votes = detail::elements<P>(votes, 0, t - window_);
      auto pooled = co_await max_pool(p, votes);
      auto top = co_await ops::topk(p, pooled, prefix);
      state_[view.layer][j].prefix = std::move(top.indices);
    }
  }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_ || !state_[step.layer][0].prefix) co_return detail::whole_cache(p, step);
    Selection<P> s;
    for (std::size_t j = 0; j < step.cache->size(); ++j) {
      const auto& hc = (*step.cache)[j];
      Selection<P> one;
      co_await select_indices(p, hc, *state_[step.layer][j].prefix, one);
      detail::append_rows(p, hc, t - window_, t, one.keys[0], one.values[0], one.positions[0]);
      s.keys.push_back(std::move(one.keys[0]));
      s.values.push_back(std::move(one.values[0]));
      s.positions.push_back(std::move(one.positions[0]));
    }
    co_return s;
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  // 1-D max pooling, `kernel` wide, same size (windows clipped at the ends).
  Task<typename P::Share> max_pool(P& p, const typename P::Share& v) {
    const std::size_t n = P::shape(v).at(0), r = kernel_ / 2;
    std::vector<std::size_t> idx(n * kernel_);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < kernel_; ++k) {
        const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(i + k) - static_cast<std::ptrdiff_t>(r);
        idx[i * kernel_ + k] = static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(at, 0, std::ptrdiff_t(n) - 1));
      }
    auto windows = P::apply(v, [&](const RingTensor& t) { return ring_reshape(ring_take_last(t, idx), {n, kernel_}); });
    auto m = co_await ops::max_last(p, windows);  // (n, 1)
    co_return ops::reshape<P>(m, {n});
  }
  struct State {
    std::optional<typename P::Share> prefix;
  };
  std::size_t budget_, window_, kernel_;
  std::vector<std::vector<State>> state_;
};

template <Protocol P>
class LongCache {
 public:
  explicit LongCache(std::size_t budget, std::size_t sinks = 4, std::size_t recent = 0)
      : budget_(budget), sinks_(sinks), recent_(recent ? recent : std::max<std::size_t>(4, budget / 8)) {
    if (budget_ <= sinks_ + recent_) throw Error(ErrorCode::invalid_argument, "LongCache: budget too small");
  }
  std::string name() const { return "longcache"; }
  void reset(std::size_t layers, std::size_t heads) { state_.assign(layers, std::vector<State>(heads)); }
  Task<void> after_prefill(P&, const PrefillView<P>&) { co_return; }
  Task<Selection<P>> select(P& p, const StepView<P>& step) {
    const std::size_t t = step.position + 1;
    if (t <= budget_) co_return detail::whole_cache(p, step);
    co_return co_await select_every_head(p, step.cache->size(), [&](P& q, std::size_t j) {
      return select_head(q, step, j);
    });
  }
  Task<void> observe(P&, const StepView<P>&, const std::vector<typename P::Share>&) { co_return; }

 private:
  struct State {
    std::optional<typename P::Share> unit;
    std::size_t normalised = 0;
  };
  // Cosine similarity of every token between the sinks and the recent window
  // to the group's queries; the top ones, plus the sinks and the window.
  Task<Selection<P>> select_head(P& p, const StepView<P>& step, std::size_t j) {
    const std::size_t t = step.position + 1;
    State& st = state_[step.layer][j];
    const auto& hc = (*step.cache)[j];
    std::optional<typename P::Share> sim;
    {
      auto scope = cost_scope(p, CostTag::similarity);
      // Unit keys k/|k| for the tokens not normalised yet.
      auto fresh = rows<P>(hc.keys, st.normalised, t);
      const std::size_t d = P::shape(fresh).at(1);
      auto sq = ops::sum_last<P>(co_await p.mul_trunc(fresh, fresh));  // (m, 1)
      auto inv = co_await ops::rsqrt(p, sq);
      auto unit = co_await p.mul_trunc(fresh, ops::broadcast_last<P>(inv, d));
      st.unit = st.normalised == 0 ? unit : stack_rows<P>(*st.unit, unit);
      st.normalised = t;
      sim = co_await group_scores(p, (*step.queries)[j], rows<P>(*st.unit, sinks_, t - recent_));
    }
    ops::TopK<P> top;
    {
      auto scope = cost_scope(p, CostTag::topk);
      top = co_await ops::topk(p, *sim, budget_ - sinks_ - recent_);
    }
    RingTensor offset = ring_filled(P::shape(top.indices), sinks_);
    auto picked = p.add_public(top.indices, offset);
    auto k = rows<P>(hc.keys, 0, sinks_), v = rows<P>(hc.values, 0, sinks_);
    auto pos = public_range(p, hc.keys, 0, sinks_);
    Selection<P> one;
    co_await select_indices(p, hc, picked, one);
    k = stack_rows<P>(k, one.keys[0]);
    v = stack_rows<P>(v, one.values[0]);
    pos = ops::concat_last<P>(pos, one.positions[0]);
    detail::append_rows(p, hc, t - recent_, t, k, v, pos);
    Selection<P> out;
    out.keys.push_back(std::move(k));
    out.values.push_back(std::move(v));
    out.positions.push_back(std::move(pos));
    co_return out;
  }

  std::size_t budget_, sinks_, recent_;
  std::vector<std::vector<State>> state_;
};

}  // namespace mpcache::kv
