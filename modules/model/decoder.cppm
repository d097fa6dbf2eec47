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
// This partition is the Decoder class: its interface, the sequence it runs
// (position, KV cache, the checks), the prefill's loop over layers and the
// declarations of its other members, defined by job in :decoder_linear
// (token input, embeddings, RoPE, the norm-fused projections, the LM head),
// :decoder_attention (prefill and decode attention), :decoder_mlp and
// :decoder_batch (the decode step of one or more sequences).
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
    if (tokens && tokens->size() != count)
      throw Error(ErrorCode::invalid_argument, "embed: " + std::to_string(tokens->size()) + " token ids for " +
                                                   std::to_string(count) + " positions");
    start_sequence(policy);
    // The one-hot prompt (count x vocab: 155 MB per party for 64 tokens of
    // Qwen2's 151,936) is input and embedded in waves of rows within the
    // memory budget (prefill_bytes_per_one_hot), each dropped once embedded.
    Share h;
    for (const RowBlock& wave : one_hot_waves(count)) {
      std::optional<std::vector<std::uint32_t>> part;
      if (tokens) part.emplace(tokens->begin() + wave.begin, tokens->begin() + wave.end);
      const Share one_hot = co_await input_one_hot(p, owner, std::move(part), wave.end - wave.begin);
      h = co_await embed_wave(p, std::move(h), one_hot, wave);
    }
    co_return co_await prefill_embedded(p, policy, std::move(h), count, std::move(layer_done));
  }

  // The same, for tokens given as a secret one-hot matrix (count, vocab) of
  // 0/1 integers that no party knows: a service client's input. `rows_of`
  // gives its rows [begin, end) a wave at a time, in the waves the prompt
  // above is input in, so that the whole is never held (155 MB per party
  // for 64 of Qwen2's tokens).
  template <class Pol>
    requires kv::Policy<Pol, P>
  Task<Share> prefill_one_hot(P& p, Pol& policy, std::size_t count, std::function<Share(RowBlock)> rows_of,
                              std::function<void(std::size_t layer)> layer_done = {}) {
    check_prefill(count);
    start_sequence(policy);
    Share h;
    for (const RowBlock& wave : one_hot_waves(count)) h = co_await embed_wave(p, std::move(h), rows_of(wave), wave);
    co_return co_await prefill_embedded(p, policy, std::move(h), count, std::move(layer_done));
  }

 private:
  // The waves of rows a prompt's one-hot is input and embedded in.
  std::vector<RowBlock> one_hot_waves(std::size_t count) const {
    return even_row_blocks(count, c_.vocab_size, options_.prefill_memory_budget, prefill_bytes_per_one_hot);
  }

  // The prompt's embedded rows so far, `h`, with the wave's appended.
  Task<Share> embed_wave(P& p, Share h, const Share& one_hot, RowBlock wave) {
    check_one_hot(one_hot);
    if (P::shape(one_hot)[0] != wave.end - wave.begin)
      throw Error(ErrorCode::invalid_argument, "one-hot rows [" + std::to_string(wave.begin) + ", " +
                                                   std::to_string(wave.end) + ") came as " +
                                                   shape_string(P::shape(one_hot)));
    Share rows = co_await embed(p, one_hot, consecutive(wave.begin, wave.end - wave.begin));
    if (wave.begin == 0) co_return rows;
    co_return ops::stack_rows<P>(h, rows);
  }

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
  // `earlier`: rows of the same sequence in this step, in the slots just
  // before this one (a speculative step's rows, each slot a copy of the
  // sequence made before the step): this row sits at position length() +
  // earlier and attends to them too, so each slot ends the step as the
  // sequence would be after its row.
  template <class Pol>
  struct BatchSlot {
    Decoder* decoder = nullptr;
    Pol* policy = nullptr;
    Share one_hot;
    std::size_t earlier = 0;
  };

  // The secret one-hot rows (count, vocab) of tokens `owner` gives (others
  // pass nullopt).
  Task<Share> one_hot_tokens(P& p, PartyId owner, std::optional<std::vector<std::uint32_t>> tokens,
                             std::size_t count) {
    co_return co_await input_one_hot(p, owner, std::move(tokens), count);
  }

  // Continue as `row`, a copy of this decoder that ran further (a
  // speculative step's row that was accepted): its cache and position.
  void take_sequence(Decoder&& row) {
    if (&row.w_ != &w_) throw Error(ErrorCode::invalid_argument, "take_sequence: a decoder of other weights");
    cache_ = std::move(row.cache_);
    length_ = row.length_;
  }

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
  static Task<Share> decode_batch(P& p, std::vector<BatchSlot<Pol>> slots);

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

  static std::vector<std::size_t> consecutive(std::size_t first, std::size_t count) {
    std::vector<std::size_t> positions(count);
    std::iota(positions.begin(), positions.end(), first);
    return positions;
  }

  bool gpt2() const { return c_.architecture == Architecture::gpt2; }

  // Layer l's weights; one set for all with tie_layers().
  const LayerWeights<P>& layer_weights(std::size_t layer) const { return w_.layers[w_.tied_layers ? 0 : layer]; }

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

  // A policy's early ranking (rank_early) for one sequence of a decode step,
  // to run while the norm does.
  using Ranker = std::function<Task<void>(P&)>;

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

  // Defined in the partitions by job, all part of this class:
  // token input, embedding, RoPE, the norm-fused projections and the LM
  // head (decoder_linear.cppm).
  Task<Share> input_one_hot(P& p, PartyId owner, std::optional<std::vector<std::uint32_t>> tokens,
                            std::size_t count);
  Task<Share> embed(P& p, const Share& one_hot, const std::vector<std::size_t>& positions);
  Share position_rows(const P& p, const std::vector<std::size_t>& positions) const;
  std::pair<RealTensor, RealTensor> rope_tables(const std::vector<std::size_t>& positions, std::size_t heads) const;
  Task<Share> rope(P& p, const Share& x, const std::vector<std::size_t>& positions, std::size_t heads);
  Task<std::vector<Share>> norm_affine(P& p, const Share& h, const Weight<P>& gamma, const std::optional<Weight<P>>& beta,
                                       std::vector<std::pair<const Weight<P>*, const std::optional<Weight<P>>*>> projections);
  Share with_bias(const P& p, Share y, const std::optional<Share>& bias) const;
  Task<Share> affine(P& p, const Share& x, const Weight<P>& weight, const std::optional<Weight<P>>& bias,
                     int input_shift = 0);
  Task<std::array<Share, 3>> project_rotated(P& p, std::size_t layer, const Share& h_in,
                                             const std::vector<std::size_t>& positions,
                                             const std::vector<Ranker>& rankers = {});
  Task<Share> head(P& p, const Share& h);

  // Attention: a prefill's causal attention over the prompt in waves of
  // query rows, a decode step's over the policy's selection
  // (decoder_attention.cppm).
  template <class Pol>
  Task<Share> attention_block(P& p, Pol& policy, std::size_t layer, const Share& h_in, std::size_t count,
                              std::vector<Share>* prefill_probs, bool last_row_out = false);
  Task<std::vector<Share>> prefill_attention(P& p, std::size_t layer, const Share& qr, std::size_t count,
                                             bool keep_weights, std::vector<Share>& probs);
  void place_wave_weights(std::vector<RingTensor>& into, const Share& wave_probs, const RowBlock& wave,
                          std::size_t g, std::size_t count) const;
  Task<std::vector<Share>> attention_rows(P& p, std::size_t layer, const Share& qr, std::size_t count,
                                          const RowBlock& wave, bool keep_weights, std::vector<Share>& probs);
  Task<Share> prefill_head(P& p, const Share& queries, const kv::HeadCache<P>& cache, std::size_t g,
                           const RowBlock& wave, bool keep_weights, Share& probs_out);
  Task<Share> prefill_block(P& p, const Share& queries, const kv::HeadCache<P>& cache, std::size_t g,
                            const RowBlock& block, std::size_t plan_rows, Share* probs_out);
  template <class Pol>
  Task<Share> attend(P& p, Pol& policy, const kv::StepView<P>& view, const kv::Selection<P>& sel);
  Task<Share> decode_head(P& p, const Share& queries, const Share& keys, const Share& values, Share& probs_out);
  Task<Share> decode_picked(P& p, const Share& queries, const kv::ClusterPick<P>& pick, Share& probs_out);
  Share join_heads(const std::vector<Share>& outputs) const;

  // The MLP block: LLaMA's SiLU-gated one, GPT-2's GeLU one (decoder_mlp.cppm).
  Task<Share> mlp_block(P& p, std::size_t layer, const Share& h_in);
  Task<Share> activation(P& p, const Share& first, const Share* second, std::size_t plan_elements = 0);
  Task<Share> activation_in_waves(P& p, const Share& first, const Share* second);

  // The decode step of a batch of sequences, and early ranking
  // (decoder_batch.cppm).
  template <class Pol>
  static void check_batch(const std::vector<BatchSlot<Pol>>& slots);
  template <class Pol>
  static std::vector<std::size_t> batch_positions(const std::vector<BatchSlot<Pol>>& slots);
  template <class T>
  using Results = std::vector<std::conditional_t<std::is_void_v<T>, std::monostate, T>>;  // as when_all's
  template <class T, class Body>
  static Task<Results<T>> per_sequence(P& p, std::size_t count, Body body);
  template <class Pol>
  static Task<Share> decode_layer(P& p, std::vector<BatchSlot<Pol>>& slots, std::size_t layer, const Share& h_in);
  template <class Pol>
  static Task<std::vector<Share>> attend_in_turn(P& p, std::vector<BatchSlot<Pol>>& slots,
                                                 const std::vector<kv::StepView<P>>& views,
                                                 const std::vector<bool>& waits, std::size_t layer);
  template <class Pol>
  bool ranks_early(const Pol& policy, std::size_t layer) const;
  template <class Pol>
  Task<void> rank_early(P& p, Pol& policy, std::size_t layer, const Share& h_in, std::size_t position);

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
      B&, kv::AnyPolicy<B>&, std::size_t, std::function<B::Share(RowBlock)>, std::function<void(std::size_t)>); \
  extern template Task<B::Share> Decoder<B>::decode_one_hot<kv::AnyPolicy<B>>(B&, kv::AnyPolicy<B>&,          \
                                                                              const B::Share&);             \
  extern template Task<B::Share> Decoder<B>::decode_batch<kv::AnyPolicy<B>>(                                 \
      B&, std::vector<Decoder<B>::BatchSlot<kv::AnyPolicy<B>>>);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_EXTERN_DECODER)
#undef MPCACHE_EXTERN_DECODER
}  // namespace mpcache
