// Decoder-only transformer over any Protocol: prefill (full causal
// attention) and incremental decode over a KV cache, attention restricted to
// what a KV Policy selects. Pre-norm blocks:
//   LLaMA:  h += o_proj(attn(rope(q), rope(k), v))   x = rms_norm(h)
//           h += down(silu(gate(x)) * up(x))         x = rms_norm(h)
//   GPT-2:  h = wte[tok] + wpe[pos]; biases on every projection;
//           h += c_proj(attn(q, k, v))               x = layer_norm(h)
//           h += c_proj(gelu(c_fc(x)))               x = layer_norm(h)
// RoPE is the Hugging Face rotate_half convention (dimension i pairs with
// i + d/2), its frequencies ModelConfig::rope_inv_freq (rope_theta,
// rope_scaling). Qwen2 (and LLaMA's attention_bias) add biases to the
// projections. 1/sqrt(head_dim) is folded into the query weights (and
// bias) at load time.
// GeLU is the erf form (GPT-2's tanh "gelu_new" differs by < 3e-4).
module;
#include "backends.hpp"
export module mpcache.model:decoder;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import :config;
import :weights;
import :prefill_memory;

export namespace mpcache {

// Per decode step and layer, for metrics: each KV head's query group
// (group, head_dim; as attention uses them, scaled), its full attention
// weights over the whole cache (group, T), and the positions the policy
// selected (n). The keys are in cache(). Only computed when a probe is
// installed.
template <Protocol P>
using StepProbe = std::function<void(std::size_t layer, std::size_t kv_head, const typename P::Share& queries,
                                     const typename P::Share& full_probs,
                                     const typename P::Share& selected_positions)>;

template <Protocol P>
class Decoder {
 public:
  using Share = typename P::Share;

  // The gated MLP's hidden values are carried at 2^(f-4) into the down
  // projection, whose sums reach 2^44 at 2^(2f) on outlier features (see
  // affine); they keep 2^-14.
  static constexpr int silu_output_shift = 4;

  explicit Decoder(const DecoderWeights<P>& weights, DecoderOptions options = {})
      : w_(weights), c_(weights.config), options_(options) {
    if (options_.prefill_memory_budget == 0)
      throw Error(ErrorCode::invalid_argument, "decoder: a prefill memory budget of 0 bytes");
    if (c_.num_heads % c_.num_kv_heads != 0 || (c_.architecture == Architecture::llama && c_.head_dim % 2 != 0))
      throw Error(ErrorCode::invalid_argument, "decoder: heads must group evenly, head_dim even");
    if (w_.layers.size() != (w_.tied_layers ? 1 : c_.num_layers))
      throw Error(ErrorCode::invalid_argument, "decoder: " + std::to_string(w_.layers.size()) +
                                                   " layer weights for " + std::to_string(c_.num_layers) + " layers");
  }

  const ModelConfig& config() const noexcept { return c_; }
  const DecoderOptions& options() const noexcept { return options_; }
  std::size_t length() const noexcept { return length_; }
  const std::vector<std::vector<kv::HeadCache<P>>>& cache() const noexcept { return cache_; }
  // Bytes of KV cache this party holds (all of it, or, under a policy that
  // keeps the cache itself, the rows it has not yet taken).
  std::size_t cache_bytes() const {
    std::size_t bytes = 0;
    for (const auto& layer : cache_)
      for (const auto& hc : layer) bytes += share_bytes<P>(hc.keys) + share_bytes<P>(hc.values);
    return bytes;
  }
  // With a probe installed the decoder keeps the whole cache (the probe
  // attends over it), also under a policy that keeps its own.
  void set_probe(StepProbe<P> probe) { probe_ = std::move(probe); }
  // Let policies that can (kv::EarlyRanking) rank while the norm runs: on
  // by default; off gives the same selections (up to rounding near ties),
  // ranked after the norm, for comparisons.
  void set_early_ranking(bool on) noexcept { early_ranking_ = on; }

  // Prefill `count` tokens (the owner's ids; others pass nullopt). Starts a
  // new sequence. Returns logits (count, vocab), or the last position's
  // (1, vocab) under PrefillLogits::last. `layer_done(l)`, if given,
  // is called once layer l and the policy's look at it are done (progress
  // reports).
  template <class Pol>
    requires kv::Policy<Pol, P>
  Task<Share> prefill(P& p, Pol& policy, PartyId owner, std::optional<std::vector<std::uint32_t>> tokens,
                      std::size_t count, std::function<void(std::size_t layer)> layer_done = {}) {
    check_prefill(count);
    Share h;
    {
      // The one-hot prompt (count x vocab; 412 MB per party for 512 GPT-2
      // tokens) is dropped once embedded, before the layers' working sets.
      const Share one_hot = co_await input_one_hot(p, owner, std::move(tokens), count);
      check_one_hot(one_hot);
      start_sequence(policy);
      h = co_await embed(p, one_hot, consecutive(0, count));
    }
    co_return co_await prefill_embedded(p, policy, std::move(h), count, std::move(layer_done));
  }

  // The same, for tokens given as a secret one-hot matrix (count, vocab) of
  // 0/1 integers that no party knows: a service client's input.
  template <class Pol>
    requires kv::Policy<Pol, P>
  Task<Share> prefill_one_hot(P& p, Pol& policy, const Share& one_hot,
                              std::function<void(std::size_t layer)> layer_done = {}) {
    check_one_hot(one_hot);
    const std::size_t count = P::shape(one_hot)[0];
    check_prefill(count);
    start_sequence(policy);
    auto h = co_await embed(p, one_hot, consecutive(0, count));
    co_return co_await prefill_embedded(p, policy, std::move(h), count, std::move(layer_done));
  }

 private:
  // A new sequence: no cache, the policy reset.
  template <class Pol>
  void start_sequence(Pol& policy) {
    length_ = 0;
    cache_.assign(c_.num_layers, {});
    policy.reset(c_.num_layers, c_.num_kv_heads);
  }

  // The prefill's layers and LM head over the embedded prompt h (count, d).
  template <class Pol>
  Task<Share> prefill_embedded(P& p, Pol& policy, Share h, std::size_t count,
                               std::function<void(std::size_t layer)> layer_done) {
    // The policy's look at layer l's prefill attention (static eviction,
    // summaries) needs nothing from layer l + 1: it runs concurrently with
    // layer l + 1 (and the last one with the LM head). Layer l's policy work
    // still finishes before layer l + 1's starts (index sharing needs that).
    // With only the last position's logits wanted, the last layer keeps
    // every row's keys and values but runs its attention output and MLP for
    // the last row alone (and its attention too, unless the policy reads
    // every row's weights): no later layer reads the other rows.
    const bool last_only = options_.prefill_logits == PrefillLogits::last;
    std::vector<Share> previous;  // layer l - 1's attention weights, per KV head
    for (std::size_t l = 0; l < c_.num_layers; ++l) {
      std::vector<Share> current;
      const bool last_row_out = last_only && l + 1 == c_.num_layers;
      if (l == 0) {
        h = co_await prefill_layer(p, policy, l, h, count, current, last_row_out);
      } else {
        P pl = p.fork(), pp = p.fork();
        auto [next, none] = co_await when_all(prefill_layer(pl, policy, l, h, count, current, last_row_out),
                                              policy_prefill(pp, policy, l - 1, count, previous, layer_done));
        (void)none;
        h = std::move(next);
      }
      previous = std::move(current);
    }
    length_ = count;
    P ph = p.fork(), pp = p.fork();
    auto [logits, none] =
        co_await when_all(head(ph, h), policy_prefill(pp, policy, c_.num_layers - 1, count, previous, layer_done));
    (void)none;
    co_return logits;
  }

 public:
  // Cost benchmarks at long contexts: start a sequence after `count` prompt
  // tokens whose KV cache ([layer][kv head], keys and values (count,
  // head_dim)) is given, e.g. as random shares, instead of computed by a
  // prefill. The policy is reset; the caller then gives it its look at the
  // prompt (after_prefill over cache(), then release_taken_prompt; or a
  // policy's own prepared state). A policy that keeps its own cache
  // (owns_cache) may be given only the rows [first, count) it has not taken,
  // as a prefill leaves them (first = count - 1): its prepared state then
  // holds the prompt once, not twice.
  template <class Pol>
    requires kv::Policy<Pol, P>
  void start_from_cache(Pol& policy, std::vector<std::vector<kv::HeadCache<P>>> cache, std::size_t count) {
    if (count == 0 || count >= c_.max_positions)
      throw Error(ErrorCode::invalid_argument, "start_from_cache: " + std::to_string(count) +
                                                   " tokens, outside 1.." + std::to_string(c_.max_positions - 1));
    if (cache.size() != c_.num_layers)
      throw Error(ErrorCode::invalid_argument, "start_from_cache: a cache of " + std::to_string(cache.size()) +
                                                   " layers for " + std::to_string(c_.num_layers));
    for (const auto& layer : cache) {
      if (layer.size() != c_.num_kv_heads)
        throw Error(ErrorCode::invalid_argument, "start_from_cache: a layer of " + std::to_string(layer.size()) +
                                                     " KV heads for " + std::to_string(c_.num_kv_heads));
      for (const auto& hc : layer) {
        if (hc.first != 0 && !drops_taken_rows(policy))
          throw Error(ErrorCode::invalid_argument,
                      "start_from_cache: a cache from token " + std::to_string(hc.first) + ", but policy " +
                          std::string(policy.name()) +
                          (probe_ ? " is probed (the probe attends over the whole cache)"
                                  : " does not keep the prompt itself (owns_cache)") +
                          ": give it every token from 0");
        if (hc.first >= count)
          throw Error(ErrorCode::invalid_argument, "start_from_cache: a cache from token " + std::to_string(hc.first) +
                                                       " of " + std::to_string(count) + " holds no token");
        const Shape rows{count - hc.first, c_.head_dim};
        if (P::shape(hc.keys) != rows || P::shape(hc.values) != rows)
          throw Error(ErrorCode::invalid_argument, "start_from_cache: keys " + shape_string(P::shape(hc.keys)) +
                                                       " and values " + shape_string(P::shape(hc.values)) +
                                                       ", expected " + shape_string(rows) + " each");
      }
    }
    cache_ = std::move(cache);
    length_ = count;
    policy.reset(c_.num_layers, c_.num_kv_heads);
  }

  // After the caller gave the policy its look at a cache from
  // start_from_cache: a policy that keeps its own cache has taken the
  // prompt's rows, so the decoder keeps the last only, as after a prefill.
  template <class Pol>
    requires kv::Policy<Pol, P>
  void release_taken_prompt(const Pol& policy) {
    if (!drops_taken_rows(policy)) return;
    for (std::size_t l = 0; l < cache_.size(); ++l) keep_last_row(l);
  }

  // One token at position length(); returns logits (1, vocab).
  template <class Pol>
    requires kv::Policy<Pol, P>
  Task<Share> decode(P& p, Pol& policy, PartyId owner, std::optional<std::uint32_t> token) {
    check_decode();
    std::optional<std::vector<std::uint32_t>> ids;
    if (token) ids = std::vector<std::uint32_t>{*token};
    auto one_hot = co_await input_one_hot(p, owner, std::move(ids), 1);
    co_return co_await decode_one_hot(p, policy, one_hot);
  }

  // The same, for a token given as a secret one-hot row (1, vocab): e.g. the
  // last chosen token, which then never leaves the parties.
  template <class Pol>
    requires kv::Policy<Pol, P>
  Task<Share> decode_one_hot(P& p, Pol& policy, const Share& one_hot) {
    std::vector<BatchSlot<Pol>> one{{this, &policy, one_hot}};
    co_return co_await decode_batch(p, std::move(one));
  }

  // One sequence of a batched decode step: its decoder (cache, position),
  // its policy, and its token as a secret one-hot row (1, vocab).
  template <class Pol>
  struct BatchSlot {
    Decoder* decoder = nullptr;
    Pol* policy = nullptr;
    Share one_hot;
  };

  // One decode step of several sequences at once (continuous batching).
  // Their rows stack into one (B, d) activation: each weight matrix is read
  // once per step, and the norms, projections, MLP and LM head of all B run
  // in the same rounds. Attention runs per sequence, over its own cache and
  // policy, all concurrently. Returns the logits (B, vocab), row i for slot
  // i. The decoders must share one set of weights; a sequence may join or
  // leave between any two steps. A batch of one is decode_one_hot: the same
  // streams, rounds and bytes as a decode always had.
  template <class Pol>
    requires kv::Policy<Pol, P>
  static Task<Share> decode_batch(P& p, std::vector<BatchSlot<Pol>> slots) {
    check_batch(slots);
    Decoder& lead = *slots.front().decoder;
    Share hot = slots.front().one_hot;
    for (std::size_t i = 1; i < slots.size(); ++i) hot = ops::stack_rows<P>(hot, slots[i].one_hot);
    auto h = co_await lead.embed(p, hot, batch_positions(slots));
    for (std::size_t l = 0; l < lead.c_.num_layers; ++l) h = co_await decode_layer(p, slots, l, h);
    for (auto& slot : slots) ++slot.decoder->length_;
    co_return co_await lead.head(p, h);
  }

 private:
  void check_prefill(std::size_t count) const {
    if (count == 0) throw Error(ErrorCode::invalid_argument, "prefill of zero tokens");
    if (count > c_.max_positions)
      throw Error(ErrorCode::invalid_argument, "prefill of " + std::to_string(count) +
                                                   " tokens exceeds max_position_embeddings " +
                                                   std::to_string(c_.max_positions));
  }
  void check_decode() const {
    if (length_ == 0) throw Error(ErrorCode::invalid_argument, "decode before prefill");
    if (length_ >= c_.max_positions)
      throw Error(ErrorCode::invalid_argument, "decode past max_position_embeddings");
  }
  void check_one_hot(const Share& one_hot) const {
    const Shape s = P::shape(one_hot);
    if (s.size() != 2 || s[1] != c_.vocab_size)
      throw Error(ErrorCode::invalid_argument, "one-hot tokens of shape " + shape_string(s) +
                                                   ", expected (tokens, " + std::to_string(c_.vocab_size) + ")");
  }

  template <class Pol>
  static void check_batch(const std::vector<BatchSlot<Pol>>& slots) {
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
      slot.decoder->check_one_hot(slot.one_hot);
      if (P::shape(slot.one_hot)[0] != 1)
        throw Error(ErrorCode::invalid_argument,
                    "decode of " + std::to_string(P::shape(slot.one_hot)[0]) + " tokens at once");
    }
  }

  template <class Pol>
  static std::vector<std::size_t> batch_positions(const std::vector<BatchSlot<Pol>>& slots) {
    std::vector<std::size_t> positions;
    for (const auto& slot : slots) positions.push_back(slot.decoder->length_);
    return positions;
  }

  static std::vector<std::size_t> consecutive(std::size_t first, std::size_t count) {
    std::vector<std::size_t> positions(count);
    std::iota(positions.begin(), positions.end(), first);
    return positions;
  }

  // The owner's token ids as a secret one-hot matrix (count, vocab).
  Task<Share> input_one_hot(P& p, PartyId owner, std::optional<std::vector<std::uint32_t>> tokens,
                            std::size_t count) {
    const std::size_t v = c_.vocab_size;
    auto scope = cost_scope(p, CostTag::linear);
    std::optional<RingTensor> hot;
    if (tokens) {
      if (tokens->size() != count)
        throw Error(ErrorCode::invalid_argument, "embed: " + std::to_string(tokens->size()) +
                                                     " token ids for " + std::to_string(count) +
                                                     " positions");
      RingTensor t = ring_zeros({count, v});
      for (std::size_t i = 0; i < count; ++i) {
        if ((*tokens)[i] >= v)
          throw Error(ErrorCode::invalid_argument, "token id " + std::to_string((*tokens)[i]) +
                                                       " is outside the vocabulary of " +
                                                       std::to_string(v));
        t(i, (*tokens)[i]) = 1;
      }
      hot = std::move(t);
    }
    co_return co_await p.input(owner, std::move(hot), {count, v});  // integer 0/1
  }

  // Token embeddings (and learned positions) of one-hot rows, row t at
  // position positions[t].
  Task<Share> embed(P& p, const Share& one_hot, const std::vector<std::size_t>& positions) {
    auto scope = cost_scope(p, CostTag::linear);
    auto h = co_await p.matmul(one_hot, w_.embed);
    if (w_.positions) h = p.add(h, position_rows(p, positions));  // learned positions
    co_return h;
  }

  // Rows of the learned position table: one slice when they run in order.
  Share position_rows(const P& p, const std::vector<std::size_t>& positions) const {
    const std::size_t first = positions.front();
    if (positions == consecutive(first, positions.size()))
      return weight_rows(p, *w_.positions, first, first + positions.size());
    Share rows = weight_rows(p, *w_.positions, first, first + 1);
    for (std::size_t t = 1; t < positions.size(); ++t)
      rows = ops::stack_rows<P>(rows, weight_rows(p, *w_.positions, positions[t], positions[t] + 1));
    return rows;
  }

  // Public cos/sin tables for rows at `positions`, tiled over `heads`
  // heads: (rows, heads * d); sin carries rotate_half's sign.
  std::pair<RealTensor, RealTensor> rope_tables(const std::vector<std::size_t>& positions, std::size_t heads) const {
    const std::size_t d = c_.head_dim, half = d / 2, count = positions.size();
    const std::vector<double> inv = c_.rope_inv_freq();  // rope_theta and rope_scaling
    RealTensor cs = RealTensor::zeros({count, heads * d}), sn = cs;
    for (std::size_t t = 0; t < count; ++t)
      for (std::size_t i = 0; i < half; ++i) {
        const double ang = double(positions[t]) * inv[i];
        for (std::size_t hh = 0; hh < heads; ++hh) {
          cs(t, hh * d + i) = cs(t, hh * d + i + half) = std::cos(ang);
          sn(t, hh * d + i) = -std::sin(ang);  // rotate_half: first half takes -x2
          sn(t, hh * d + i + half) = std::sin(ang);
        }
      }
    return {cs, sn};
  }

  // x (rows, heads * d), row t at positions[t] -> x*cos + rotate_half(x)*sin,
  // one truncation.
  Task<Share> rope(P& p, const Share& x, const std::vector<std::size_t>& positions, std::size_t heads) {
    auto scope = cost_scope(p, CostTag::linear);
    const std::size_t d = c_.head_dim, half = d / 2;
    auto [cs, sn] = rope_tables(positions, heads);
    std::vector<std::size_t> swap(heads * d);
    for (std::size_t hh = 0; hh < heads; ++hh)
      for (std::size_t i = 0; i < d; ++i) swap[hh * d + i] = hh * d + (i < half ? i + half : i - half);
    auto swapped = P::apply(x, [&](const RingTensor& t) { return ring_take_last(t, swap); });
    co_return co_await ops::sum_weighted_by_reals<P>(p, {{x, cs}, {swapped, sn}});
  }

  bool gpt2() const { return c_.architecture == Architecture::gpt2; }

  // Layer l's weights; one set for all with tie_layers().
  const LayerWeights<P>& layer_weights(std::size_t layer) const { return w_.layers[w_.tied_layers ? 0 : layer]; }

  // norm(h) W_i (+ b_i) for each projection: the norm's last product scales
  // the projections' rows (ops::norm_project), one round fewer than the
  // norm followed by the matmuls. The matmuls count as linear, the rest as norm.
  // Weights (Weight<P>) go to the products as they are kept; norms and
  // biases are small and expanded here.
  Task<std::vector<Share>> norm_affine(P& p, const Share& h, const Weight<P>& gamma, const std::optional<Weight<P>>& beta,
                                       std::vector<std::pair<const Weight<P>*, const std::optional<Weight<P>>*>> projections) {
    auto scope = cost_scope(p, CostTag::norm);
    std::vector<const Weight<P>*> weights;
    for (const auto& pr : projections) weights.push_back(pr.first);
    auto out = co_await ops::norm_project(p, h, expand_weight(p, gamma), expand_weight(p, beta), c_.norm_eps, weights,
                                          w_.centered_residual);
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = with_bias(p, std::move(out[i]), expand_weight(p, *projections[i].second));
    co_return out;
  }

  Share with_bias(const P& p, Share y, const std::optional<Share>& bias) const {
    if (!bias) return y;
    const std::size_t n = P::shape(y).at(0), out = P::shape(y).at(1);
    return p.add(y, ops::tile_row<P>(ops::reshape<P>(*bias, {1, out}), n));
  }

  // x W (+ b): one matmul round, the bias added locally. With input_shift,
  // x is carried at 2^(f-s): the product's sums stay 2^s further from
  // truncation's failure range, and scaling back up by the public 2^s is
  // exact and local.
  Task<Share> affine(P& p, const Share& x, const Weight<P>& weight, const std::optional<Weight<P>>& bias,
                     int input_shift = 0) {
    auto scope = cost_scope(p, CostTag::linear);
    auto y = co_await p.matmul_trunc(x, weight);
    if (input_shift > 0) y = p.mul_public(y, ring_filled(P::shape(y), Ring{1} << input_shift));
    co_return with_bias(p, std::move(y), expand_weight(p, bias));
  }

  // Columns [h*d, (h+1)*d) of a (count, heads*d) tensor.
  Share head_columns(const Share& x, std::size_t h) const {
    return ops::slice_last<P>(x, h * c_.head_dim, (h + 1) * c_.head_dim);
  }

  template <class Pol>
  Task<Share> prefill_layer(P& p, Pol& policy, std::size_t layer, const Share& h_in, std::size_t count,
                            std::vector<Share>& probs, bool last_row_out = false) {
    auto h = co_await attention_block(p, policy, layer, h_in, count, &probs, last_row_out);
    co_return co_await mlp_block(p, layer, h);
  }

  template <class Pol>
  Task<void> policy_prefill(P& p, Pol& policy, std::size_t layer, std::size_t count, std::vector<Share>& probs,
                            const std::function<void(std::size_t)>& layer_done) {
    kv::PrefillView<P> view{layer, count, c_.num_heads / c_.num_kv_heads, &probs, &cache_[layer]};
    auto scope = cost_scope(p, CostTag::eviction);
    co_await policy.after_prefill(p, view);
    probs.clear();
    if (drops_taken_rows(policy)) keep_last_row(layer);  // the policy took the prompt's rows
    if (layer_done) layer_done(layer);
  }

  // A policy that keeps its own cache (owns_cache) reads only rows it has
  // not taken, so the decoder drops the rest, unless a probe needs them.
  template <class Pol>
  bool drops_taken_rows(const Pol& policy) const {
    return kv::OptionalMembers<P>::owns_cache(policy) && !probe_;
  }

  void keep_last_row(std::size_t layer) {
    for (auto& hc : cache_[layer]) {
      const std::size_t held = P::shape(hc.keys).at(0);
      hc = kv::HeadCache<P>{ops::rows<P>(hc.keys, held - 1, held), ops::rows<P>(hc.values, held - 1, held),
                            hc.first + held - 1};
    }
  }

  // One decode row of queries (1, heads * d) as each KV head's query group (g, d).
  std::vector<Share> query_groups(const Share& q) const {
    const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh, d = c_.head_dim;
    std::vector<Share> out(kvh);
    for (std::size_t j = 0; j < kvh; ++j)
      out[j] = ops::reshape<P>(ops::slice_last<P>(q, j * g * d, (j + 1) * g * d), {g, d});
    return out;
  }

  // Early ranking (kv::EarlyRanking) needs q up to a positive factor: LLaMA
  // layers (RMSNorm, no query bias) give it as h wq_ranking.
  template <class Pol>
  bool ranks_early(const Pol& policy, std::size_t layer) const {
    const auto& lw = layer_weights(layer);
    return early_ranking_ && lw.wq_ranking && !lw.bq && !lw.input_norm_bias &&
           kv::OptionalMembers<P>::ranks_early(policy, layer);
  }

  // h wq_ranking = q rms(h) / 16 after RoPE: two rounds (the projection,
  // RoPE's truncation) where the norm takes sixteen; then the policy's rank.
  template <class Pol>
  Task<void> rank_early(P& p, Pol& policy, std::size_t layer, const Share& h_in, std::size_t position) {
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

  // A prefill layer's attention over the prompt (the caller runs the MLP):
  // every row's output, or with `last_row_out` the last row's (1, d) alone.
  // The policy's look still gets every row's weights if it reads them.
  template <class Pol>
  Task<Share> attention_block(P& p, Pol& policy, std::size_t layer, const Share& h_in,
                              std::size_t count, std::vector<Share>* prefill_probs, bool last_row_out = false) {
    auto [qr, kr, v] = co_await project_rotated(p, layer, h_in, consecutive(length_, count));
    keep_rows(policy, layer, kr, v, /*decode=*/false);
    const auto& lw = layer_weights(layer);
    const bool policy_reads = kv::OptionalMembers<P>::reads_prefill_attention(policy, layer, count);
    std::vector<Share> outputs;
    if (last_row_out && !policy_reads) {  // one query row over the whole prompt
      outputs = co_await attention_rows(p, layer, qr, count, RowBlock{count - 1, count}, *prefill_probs);
      prefill_probs->clear();
    } else {
      outputs = co_await prefill_attention(p, layer, qr, count, policy_reads, *prefill_probs);
      if (last_row_out)
        for (auto& head : outputs) head = ops::rows<P>(head, count - 1, count);
    }
    const Share residual = last_row_out ? ops::rows<P>(h_in, count - 1, count) : h_in;
    co_return p.add(residual, co_await affine(p, join_heads(outputs), lw.wo, lw.bo));
  }

  // A policy's early ranking (rank_early) for one sequence of a decode step,
  // to run while the norm does.
  using Ranker = std::function<Task<void>(P&)>;

  // The norm and the q, k, v projections of h_in's rows (`rankers` run
  // meanwhile), then RoPE on q and k: (q, k, v), row t at positions[t].
  Task<std::array<Share, 3>> project_rotated(P& p, std::size_t layer, const Share& h_in,
                                             const std::vector<std::size_t>& positions,
                                             const std::vector<Ranker>& rankers = {}) {
    const auto& lw = layer_weights(layer);
    auto project = [&](P& pn) {
      return norm_affine(pn, h_in, lw.input_norm, lw.input_norm_bias,
                         {{&lw.wq, &lw.bq}, {&lw.wk, &lw.bk}, {&lw.wv, &lw.bv}});
    };
    std::vector<Share> qkv;
    if (!rankers.empty()) {  // the policies rank while the norm runs
      P pn = p.fork();
      std::vector<P> forks;
      forks.reserve(rankers.size());
      for (std::size_t i = 0; i < rankers.size(); ++i) forks.push_back(p.fork());
      std::vector<Task<void>> ranking;
      for (std::size_t i = 0; i < rankers.size(); ++i) ranking.push_back(rankers[i](forks[i]));
      auto [projected, none] = co_await when_all(project(pn), when_all(std::move(ranking)));
      (void)none;
      qkv = std::move(projected);
    } else {
      qkv = co_await project(p);
    }
    if (gpt2()) co_return std::array<Share, 3>{qkv[0], qkv[1], qkv[2]};  // learned positions, no RoPE
    P pq = p.fork(), pk = p.fork();
    auto [qr, kr] =
        co_await when_all(rope(pq, qkv[0], positions, c_.num_heads), rope(pk, qkv[1], positions, c_.num_kv_heads));
    co_return std::array<Share, 3>{std::move(qr), std::move(kr), qkv[2]};
  }

  // The new keys and values into the layer's cache: the prompt's, or the
  // step's appended (a policy that keeps its own cache took the rest).
  template <class Pol>
  void keep_rows(const Pol& policy, std::size_t layer, const Share& kr, const Share& v, bool decode) {
    const std::size_t kvh = c_.num_kv_heads, first = length_;
    auto& layer_cache = cache_[layer];
    if (layer_cache.empty()) layer_cache.resize(kvh);
    const bool policy_keeps_cache = drops_taken_rows(policy);
    if (decode && probe_ && layer_cache[0].first != 0)
      throw Error(ErrorCode::invalid_argument, "decoder: the step probe attends over the whole cache, but policy " +
                                                   std::string(policy.name()) +
                                                   " took its rows before the probe was installed");
    for (std::size_t j = 0; j < kvh; ++j) {
      auto kj = head_columns(kr, j), vj = head_columns(v, j);
      if (decode && policy_keeps_cache) {
        layer_cache[j] = kv::HeadCache<P>{std::move(kj), std::move(vj), first};
      } else if (decode) {
        layer_cache[j].keys = ops::stack_rows<P>(layer_cache[j].keys, kj);
        layer_cache[j].values = ops::stack_rows<P>(layer_cache[j].values, vj);
      } else {
        layer_cache[j].keys = std::move(kj);
        layer_cache[j].values = std::move(vj);
      }
    }
  }

  // Per query head (count, d): each KV head's query group over the prompt,
  // causal; the attention weights per KV head go to `probs` if the policy
  // reads them (else it stays empty: they would be heads x T^2 shares held
  // through the next layer). Query rows run in waves within the memory
  // budget (prefill_memory.cppm); a prompt that fits runs as one wave.
  Task<std::vector<Share>> prefill_attention(P& p, std::size_t layer, const Share& qr, std::size_t count,
                                             bool keep_weights, std::vector<Share>& probs) {
    std::vector<RowBlock> waves{{0, count}};
    if constexpr (!ExactReals<P>)  // float64 holds no bit planes: one wave
      waves = attention_row_blocks(count, c_.num_heads, options_.prefill_memory_budget);
    if (waves.size() == 1) {
      auto outputs = co_await attention_rows(p, layer, qr, count, waves[0], probs);
      if (!keep_weights) probs.clear();
      co_return outputs;
    }
    const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh;
    std::vector<std::vector<Share>> pieces(c_.num_heads);  // per head: each wave's (rows, d)
    std::vector<std::vector<RingTensor>> weights(kvh);     // per KV head: (g * count, count) per component
    for (const RowBlock& wave : waves) {
      std::vector<Share> wave_probs;
      auto outs = co_await attention_rows(p, layer, qr, count, wave, wave_probs);
      for (std::size_t hh = 0; hh < c_.num_heads; ++hh) pieces[hh].push_back(std::move(outs[hh]));
      if (keep_weights)
        for (std::size_t j = 0; j < kvh; ++j) place_wave_weights(weights[j], wave_probs[j], wave, g, count);
    }
    probs.clear();
    if (keep_weights)
      for (std::size_t j = 0; j < kvh; ++j) probs.push_back(share_from_components<P>(qr, std::move(weights[j])));
    std::vector<Share> outputs(c_.num_heads);
    for (std::size_t hh = 0; hh < c_.num_heads; ++hh) {
      outputs[hh] = pieces[hh][0];
      for (std::size_t w = 1; w < waves.size(); ++w) outputs[hh] = ops::stack_rows<P>(outputs[hh], pieces[hh][w]);
    }
    co_return outputs;
  }

  // One wave's weights (g * rows, wave.end) into a KV head's (g * count,
  // count) components, zero where a row does not attend.
  void place_wave_weights(std::vector<RingTensor>& into, const Share& wave_probs, const RowBlock& wave,
                          std::size_t g, std::size_t count) const {
    const std::size_t rows = wave.end - wave.begin, keys = wave.end;
    auto parts = share_components<P>(wave_probs);
    if (into.empty())
      for (std::size_t k = 0; k < parts.size(); ++k) into.push_back(ring_zeros({g * count, count}));
    for (std::size_t k = 0; k < parts.size(); ++k)
      for (std::size_t hh = 0; hh < g; ++hh)
        for (std::size_t t = 0; t < rows; ++t)
          std::copy_n(parts[k].data() + (hh * rows + t) * keys, keys,
                      into[k].data() + (hh * count + wave.begin + t) * count);
  }

  // Query rows `wave` of every head (rows, d), all KV heads at once (their
  // messages share rounds); the wave's weights per KV head (g * rows,
  // wave.end) go to `probs`.
  Task<std::vector<Share>> attention_rows(P& p, std::size_t layer, const Share& qr, std::size_t count,
                                          const RowBlock& wave, std::vector<Share>& probs) {
    const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh, rows = wave.end - wave.begin;
    const bool all = rows == count;
    probs.assign(kvh, Share{});
    std::vector<P> forks;
    forks.reserve(kvh);
    for (std::size_t j = 0; j < kvh; ++j) forks.push_back(p.fork());
    auto query_rows = [&](std::size_t h) {
      auto q = head_columns(qr, h);
      return all ? q : ops::rows<P>(q, wave.begin, wave.end);
    };
    std::vector<Share> group_queries(kvh);  // (g * rows, d) each; alive while the tasks run
    std::vector<Task<Share>> tasks;
    for (std::size_t j = 0; j < kvh; ++j) {
      group_queries[j] = query_rows(j * g);
      for (std::size_t hh = 1; hh < g; ++hh) group_queries[j] = ops::stack_rows<P>(group_queries[j], query_rows(j * g + hh));
      tasks.push_back(prefill_head(forks[j], group_queries[j], cache_[layer][j], g, wave, count, probs[j]));
    }
    auto outs = co_await when_all(std::move(tasks));
    std::vector<Share> outputs(c_.num_heads);
    for (std::size_t j = 0; j < kvh; ++j)
      for (std::size_t hh = 0; hh < g; ++hh) outputs[j * g + hh] = ops::rows<P>(outs[j], hh * rows, (hh + 1) * rows);
    co_return outputs;
  }

  // Runs `body(p_i, i)` for each sequence i of a batch concurrently, each on
  // a fork of p; a batch of one runs on p itself, as a decode always did.
  template <class T>
  using Results = std::vector<std::conditional_t<std::is_void_v<T>, std::monostate, T>>;  // as when_all's
  template <class T, class Body>
  static Task<Results<T>> per_sequence(P& p, std::size_t count, Body body) {
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
  template <class Pol>
  static Task<Share> decode_layer(P& p, std::vector<BatchSlot<Pol>>& slots, std::size_t layer, const Share& h_in) {
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
        return d.rank_early(pe, *slot.policy, layer, h, d.length_);
      });
    }
    auto [qr, kr, v] = co_await lead.project_rotated(p, layer, h_in, positions, rankers);

    std::vector<std::vector<Share>> queries(batch);
    std::vector<kv::StepView<P>> views;
    views.reserve(batch);
    for (std::size_t i = 0; i < batch; ++i) {
      Decoder& d = *slots[i].decoder;
      d.keep_rows(*slots[i].policy, layer, row(kr, i), row(v, i), /*decode=*/true);
      queries[i] = d.query_groups(row(qr, i));
      views.push_back(kv::StepView<P>{layer, d.length_, g, &queries[i], &d.cache_[layer]});
    }
    // Policies tag their own summaries, scores and top-k; the rest of a
    // selection (copying or gathering rows) counts as gathering.
    std::vector<kv::Selection<P>> selections;
    {
      auto scope = cost_scope(p, CostTag::gather);
      selections = co_await per_sequence<kv::Selection<P>>(
          p, batch, [&](P& ps, std::size_t i) { return slots[i].policy->select(ps, views[i]); });
    }
    auto rest = [&](P& px) -> Task<Share> {
      auto attended = co_await per_sequence<Share>(px, batch, [&](P& pa, std::size_t i) {
        return slots[i].decoder->attend(pa, *slots[i].policy, views[i], selections[i]);
      });
      Share joined = attended[0];
      for (std::size_t i = 1; i < batch; ++i) joined = ops::stack_rows<P>(joined, attended[i]);
      auto after = px.add(h_in, co_await lead.affine(px, joined, lw.wo, lw.bo));
      co_return co_await lead.mlp_block(px, layer, after);
    };
    if constexpr (kv::Prefetching<Pol, P>) {
      // The next layer's selection may need only this step's indices
      // (index sharing): let it gather while this layer finishes.
      P pr = p.fork(), pf = p.fork();
      auto prefetch_scope = cost_scope(pf, CostTag::gather);
      auto prefetch = per_sequence<void>(
          pf, batch, [&](P& pq, std::size_t i) { return slots[i].policy->prefetch(pq, layer + 1, positions[i]); });
      auto [out, none] = co_await when_all(rest(pr), std::move(prefetch));
      (void)none;
      co_return out;
    } else {
      co_return co_await rest(p);
    }
  }

  // One sequence's attention in a decode step, over its policy's selection:
  // each KV head's query group, then the policy's look at the weights.
  // Returns the heads' outputs side by side (1, heads * d).
  template <class Pol>
  Task<Share> attend(P& p, Pol& policy, const kv::StepView<P>& view, const kv::Selection<P>& sel) {
    const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh, layer = view.layer;
    if (sel.keys.size() != kvh || sel.values.size() != kvh)
      throw Error(ErrorCode::invalid_argument, "policy " + std::string(policy.name()) +
                                                   " returned a selection for the wrong number of heads");
    const std::vector<Share>& queries = *view.queries;
    std::vector<Share> probs(kvh), outputs(c_.num_heads);
    std::vector<P> forks;
    forks.reserve(kvh);
    for (std::size_t j = 0; j < kvh; ++j) forks.push_back(p.fork());
    std::vector<Task<Share>> tasks;
    for (std::size_t j = 0; j < kvh; ++j)
      tasks.push_back(decode_head(forks[j], queries[j], sel.keys[j], sel.values[j], probs[j]));
    auto outs = co_await when_all(std::move(tasks));  // (g, d) each
    for (std::size_t j = 0; j < kvh; ++j)
      for (std::size_t hh = 0; hh < g; ++hh) outputs[j * g + hh] = ops::rows<P>(outs[j], hh, hh + 1);
    {
      auto scope = cost_scope(p, CostTag::summary);  // policy bookkeeping (H2O's scores, ...)
      co_await policy.observe(p, view, probs);
    }
    if (probe_)
      for (std::size_t j = 0; j < kvh; ++j) {
        const auto& layer_cache = cache_[layer];
        auto scores = co_await p.matmul_trunc(queries[j], ops::transpose<P>(layer_cache[j].keys));
        auto full = co_await ops::softmax_last(p, scores);
        probe_(layer, j, queries[j], full, sel.positions.at(j));
      }
    co_return join_heads(outputs);
  }

  // Per-head outputs (count, d) side by side: (count, heads * d).
  Share join_heads(const std::vector<Share>& outputs) const {
    Share joined = outputs[0];
    for (std::size_t hh = 1; hh < outputs.size(); ++hh) joined = ops::concat_last<P>(joined, outputs[hh]);
    return joined;
  }

  // One KV head's query group over its own prompt, query rows `wave` of
  // each head: (g*rows, d) -> (g*rows, d), against keys [0, wave.end) (the
  // later ones are all in the future).
  Task<Share> prefill_head(P& p, const Share& queries, const kv::HeadCache<P>& cache, std::size_t g,
                           const RowBlock& wave, std::size_t count, Share& probs_out) {
    auto scope = cost_scope(p, CostTag::attention);
    const std::size_t rows = wave.end - wave.begin, keys = wave.end;
    const bool all_keys = keys == count;
    const Share early_keys = all_keys ? Share{} : ops::rows<P>(cache.keys, 0, keys);
    const Share early_values = all_keys ? Share{} : ops::rows<P>(cache.values, 0, keys);
    auto scores = co_await p.matmul_trunc(queries, ops::transpose<P>(all_keys ? cache.keys : early_keys));
    const FixedPoint fp(p.frac_bits());
    RingTensor bias = ring_zeros({g * rows, keys}), mask = ring_zeros({g * rows, keys});
    const Ring minus_big = fp.encode(-1024.0);
    for (std::size_t r = 0; r < g * rows; ++r)
      for (std::size_t c = 0; c < keys; ++c) {
        const bool future = c > wave.begin + r % rows;
        bias(r, c) = future ? minus_big : 0;
        mask(r, c) = future ? 0 : 1;
      }
    scores = p.add_public(scores, bias);  // keeps the row max on visible entries
    {
      auto softmax_scope = cost_scope(p, CostTag::softmax);
      probs_out = co_await ops::softmax_last(p, scores, std::optional<RingTensor>(mask));
    }
    co_return co_await p.matmul_trunc(probs_out, all_keys ? cache.values : early_values);
  }

  Task<Share> decode_head(P& p, const Share& queries, const Share& keys, const Share& values,
                          Share& probs_out) {
    auto scope = cost_scope(p, CostTag::attention);
    auto scores = co_await p.matmul_trunc(queries, ops::transpose<P>(keys));  // (g, n)
    auto softmax_scope = cost_scope(p, CostTag::softmax);
    auto [out, probs] = co_await ops::softmax_times(p, scores, values);
    probs_out = std::move(probs);
    co_return out;
  }

  Task<Share> mlp_block(P& p, std::size_t layer, const Share& h_in) {
    const auto& lw = layer_weights(layer);
    Share hidden;
    int hidden_shift = 0;
    if (lw.gate) {
      auto gate_up = co_await norm_affine(p, h_in, lw.post_norm, lw.post_norm_bias,
                                          {{&*lw.gate, &no_bias_}, {&lw.up, &lw.b_up}});
      auto scope = cost_scope(p, CostTag::activation);
      hidden = co_await activation_in_waves(p, gate_up[0], &gate_up[1]);
      hidden_shift = silu_output_shift;
    } else {
      auto up = co_await norm_affine(p, h_in, lw.post_norm, lw.post_norm_bias, {{&lw.up, &lw.b_up}});
      auto scope = cost_scope(p, CostTag::activation);
      hidden = co_await activation_in_waves(p, up[0], nullptr);
    }
    co_return p.add(h_in, co_await affine(p, hidden, lw.down, lw.b_down, hidden_shift));
  }

  // The MLP's activation: silu(gate) * up (carried at 2^(f-4)), or gelu(up);
  // its form chosen as for plan_elements (the whole activation's, in waves).
  Task<Share> activation(P& p, const Share& first, const Share* second, std::size_t plan_elements = 0) {
    if (second) co_return co_await ops::silu_times(p, first, *second, silu_output_shift, plan_elements);
    co_return co_await ops::gelu(p, first, plan_elements);
  }

  // The same over a prefill's rows in waves within the memory budget
  // (prefill_memory.cppm), one after another; rows that fit run as one.
  Task<Share> activation_in_waves(P& p, const Share& first, const Share* second) {
    const std::size_t rows = P::shape(first).at(0), width = P::shape(first).at(1) * (second ? 2 : 1);
    std::vector<RowBlock> waves{{0, rows}};
    if constexpr (!ExactReals<P>) waves = even_row_blocks(rows, width, options_.prefill_memory_budget);
    if (waves.size() == 1) co_return co_await activation(p, first, second);
    std::optional<Share> out;
    for (const RowBlock& wave : waves) {
      const Share a = ops::rows<P>(first, wave.begin, wave.end);
      const Share b = second ? ops::rows<P>(*second, wave.begin, wave.end) : Share{};
      auto part = co_await activation(p, a, second ? &b : nullptr, element_count(P::shape(first)));
      out = out ? ops::stack_rows<P>(*out, part) : std::move(part);
    }
    co_return std::move(*out);
  }

  Task<Share> head(P& p, const Share& h) {
    auto logits = co_await norm_affine(p, h, w_.final_norm, w_.final_norm_bias, {{&w_.lm_head, &no_bias_}});
    co_return std::move(logits[0]);
  }

  const DecoderWeights<P>& w_;
  ModelConfig c_;
  DecoderOptions options_;
  const std::optional<Weight<P>> no_bias_;  // for projections without one
  std::size_t length_ = 0;
  std::vector<std::vector<kv::HeadCache<P>>> cache_;  // [layer][kv head]
  StepProbe<P> probe_;
  bool early_ranking_ = true;
};

}  // namespace mpcache

// Compiled once, in src/model/instantiate_*.cpp (one file per backend),
// with the type-erased policy every named policy runs through.
namespace mpcache {
#define MPCACHE_EXTERN_DECODER(B)                                                                             \
  extern template class Decoder<B>;                                                                          \
  extern template Task<B::Share> Decoder<B>::prefill<kv::AnyPolicy<B>>(                                      \
      B&, kv::AnyPolicy<B>&, PartyId, std::optional<std::vector<std::uint32_t>>, std::size_t,                \
      std::function<void(std::size_t)>);                                                                     \
  extern template Task<B::Share> Decoder<B>::decode<kv::AnyPolicy<B>>(B&, kv::AnyPolicy<B>&, PartyId,         \
                                                                      std::optional<std::uint32_t>);        \
  extern template Task<B::Share> Decoder<B>::prefill_one_hot<kv::AnyPolicy<B>>(                              \
      B&, kv::AnyPolicy<B>&, const B::Share&, std::function<void(std::size_t)>);                             \
  extern template Task<B::Share> Decoder<B>::decode_one_hot<kv::AnyPolicy<B>>(B&, kv::AnyPolicy<B>&,          \
                                                                              const B::Share&);             \
  extern template Task<B::Share> Decoder<B>::decode_batch<kv::AnyPolicy<B>>(                                 \
      B&, std::vector<Decoder<B>::BatchSlot<kv::AnyPolicy<B>>>);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_EXTERN_DECODER)
#undef MPCACHE_EXTERN_DECODER
}  // namespace mpcache
