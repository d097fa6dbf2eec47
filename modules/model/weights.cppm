// Weights as secret inputs. A WeightSource gives the model owner the real
// values of a named tensor (Hugging Face names and [out, in] layout); other
// parties get nullopt and only learn the shape. Sources: a safetensors file,
// or deterministic random weights for any config (benches, tests).
module;
#include "backends.hpp"
export module mpcache.model:weights;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :safetensors;
import :config;

export namespace mpcache {

// What a weights file may hold beyond what the config needs.
enum class UnusedTensors {
  reject,  // default: a config that leaves tensors unused (2 layers of a 4-layer file) is an error
  allow,   // explicit opt-out, e.g. to run a truncated model on purpose
};

// A named-tensor getter (the model owner's; nullopt elsewhere) plus an
// optional check that runs once the loader has asked for its last tensor,
// given every name it asked for. Any callable with the getter's signature
// converts to a source without a check.
class WeightSource {
 public:
  using Getter = std::function<std::optional<RealTensor>(const std::string& name, const Shape& shape)>;
  using Finish = std::function<void(const std::set<std::string>& requested)>;
  using Holds = std::function<bool(const std::string& name)>;
  // Rows [first, last) of dim 0 of a named tensor of the given (whole) shape.
  using Rows = std::function<std::optional<RealTensor>(const std::string& name, const Shape& shape, std::size_t first,
                                                       std::size_t last)>;

  WeightSource() = default;
  template <class F>
    requires std::is_invocable_r_v<std::optional<RealTensor>, F&, const std::string&, const Shape&>
  WeightSource(F get) : get_(std::move(get)) {}  // NOLINT: implicit on purpose
  WeightSource(Getter get, Finish finish, Holds holds = {}, Rows rows = {})
      : get_(std::move(get)), finish_(std::move(finish)), holds_(std::move(holds)), rows_(std::move(rows)) {}

  std::optional<RealTensor> operator()(const std::string& name, const Shape& shape) const {
    requested_->insert(name);
    return get_(name, shape);
  }
  // Rows [first, last) of dim 0 of a tensor of `shape`: from the file alone
  // where the source reads rows (a checkpoint), else sliced from the whole
  // tensor, which is kept while the same name is asked for (random weights).
  std::optional<RealTensor> rows(const std::string& name, const Shape& shape, std::size_t first, std::size_t last) const {
    requested_->insert(name);
    if (rows_) return rows_(name, shape, first, last);
    if (cached_->first != name || !cached_->second) *cached_ = {name, get_(name, shape)};
    const auto& all = cached_->second;
    if (!all) return std::nullopt;
    const std::size_t row = all->size() / std::max<std::size_t>(shape.at(0), 1);
    Shape part = shape;
    part[0] = last - first;
    RealTensor out = RealTensor::from_shape(part);
    std::copy(all->data() + first * row, all->data() + last * row, out.data());
    if (last == shape[0]) *cached_ = {};
    return out;
  }
  // Whether a checkpoint holds `name` (the owner's loaders ask before
  // choosing a layout: GPT-2's "transformer." prefix, a stored lm_head);
  // nullopt for sources that make any tensor asked for (random weights).
  std::optional<bool> holds(const std::string& name) const {
    if (!holds_) return std::nullopt;
    return holds_(name);
  }
  // Called by the loaders after the last tensor (owner only).
  void finish() const {
    if (finish_) finish_(*requested_);
  }

 private:
  Getter get_;
  Finish finish_;
  Holds holds_;
  Rows rows_;
  std::shared_ptr<std::set<std::string>> requested_ = make_shared<std::set<std::string>>();
  std::shared_ptr<std::pair<std::string, std::optional<RealTensor>>> cached_ =
      make_shared<std::pair<std::string, std::optional<RealTensor>>>();
};

// Loads (and shape-checks) tensors from a checkpoint, kept open: one
// safetensors file, or a sharded one given by its index
// (model.safetensors.index.json, whose "weight_map" names each tensor's
// shard file in the same folder). As transformers does, a path
// .../model.safetensors that does not exist falls back to
// .../model.safetensors.index.json beside it. The index must agree with
// the shards: a missing shard, a listed tensor its shard lacks, and a
// tensor stored in a shard the index does not put it in are errors naming
// the tensor and the files. Unless `unused` allows it, tensors that the
// config did not ask for are an error once loading ends, naming them.
WeightSource weights_from_file(const std::filesystem::path& path, UnusedTensors unused = UnusedTensors::reject);
// N(0, scale^2)-like values (uniform with that standard deviation); norm
// weights ("...norm.weight", GPT-2's "ln_*.weight") are 1 + small noise. Same seed, same weights.
WeightSource random_weights(std::uint64_t seed, double scale = 0.02);
// For parties that do not own the weights.
WeightSource no_weights();

// How a protocol keeps a weight. rss3 keeps it at 8 bytes per element at
// two parties and none at the owner (Rss3Weight: the received component in
// memory, the others drawn from pairwise keys when a product uses them,
// blockwise); its matmul and matmul_trunc take the weight as it is, also
// one stored transposed (a tied LM head reads the embedding). Its input
// takes the owner's values a piece at a time. Other protocols keep shares.
template <class P>
concept CompactWeights = requires(P& p, const typename P::Weight& w, const typename P::Share& a) {
  { p.input_weight(PartyId{}, std::optional<RingTensor>{}, Shape{}) } -> std::same_as<Task<typename P::Weight>>;
  { p.input_weight(PartyId{}, Rss3WeightPieces{}, Shape{}) } -> std::same_as<Task<typename P::Weight>>;
  { P::transposed(w, bool{}) } -> std::same_as<typename P::Weight>;
  { p.expand(w) } -> std::same_as<typename P::Share>;
  { p.expand_rows(w, std::size_t{}, std::size_t{}) } -> std::same_as<typename P::Share>;
  p.matmul(a, w);
  p.matmul_trunc(a, w);
  { w.resident_bytes() } -> std::convertible_to<std::size_t>;
};

namespace detail {
template <class P>
struct WeightType {
  using type = typename P::Share;
};
template <CompactWeights P>
struct WeightType<P> {
  using type = typename P::Weight;
};
}  // namespace detail

template <Protocol P>
using Weight = typename detail::WeightType<P>::type;

// A weight's share (a copy drawn anew for compact weights, else the weight itself).
template <Protocol P>
decltype(auto) expand_weight(const P& p, const Weight<P>& w) {
  if constexpr (CompactWeights<P>) return p.expand(w);
  else return (w);
}
template <Protocol P>
std::optional<typename P::Share> expand_weight(const P& p, const std::optional<Weight<P>>& w) {
  if (!w) return std::nullopt;
  return expand_weight(p, *w);
}
// Rows [begin, end) of a weight's share.
template <Protocol P>
typename P::Share weight_rows(const P& p, const Weight<P>& w, std::size_t begin, std::size_t end) {
  if constexpr (CompactWeights<P>) return p.expand_rows(w, begin, end);
  else return ops::rows<P>(w, begin, end);
}
// Bytes a weight holds in this process.
template <Protocol P>
std::size_t weight_bytes(const Weight<P>& w) {
  if constexpr (CompactWeights<P>) return w.resident_bytes();
  else return share_bytes<P>(w);
}
// The owner's real values as a weight: ops::secret_real, or the protocol's
// compact input (the same messages).
template <Protocol P>
Task<Weight<P>> secret_weight(P& p, PartyId owner, std::optional<RealTensor> value, const Shape& shape) {
  if constexpr (CompactWeights<P>) {
    std::optional<RingTensor> encoded;
    if (value) encoded = FixedPoint(p.frac_bits()).encode(*value);
    value.reset();  // the owner streams: no float copy beside the encoded one
    co_return co_await p.input_weight(owner, std::move(encoded), shape);
  } else {
    co_return co_await ops::secret_real(p, owner, std::move(value), shape);
  }
}

// A (rows, cols) tensor of the source as a weight, read and input a piece
// of rows at a time under CompactWeights (the owner never holds it whole,
// as reals or encoded); `row_map` (owner side) transforms each piece's rows
// and must act on rows alone (rows_centered). Other protocols read it whole.
template <Protocol P>
Task<Weight<P>> secret_weight_rows(P& p, PartyId owner, const WeightSource& source, const std::string& name,
                                   const Shape& shape, std::function<void(RealTensor&)> row_map = {}) {
  const bool mine = p.holds_input(owner);
  if constexpr (CompactWeights<P>) {
    Rss3WeightPieces pieces;
    if (mine)
      pieces = [&source, name, shape, row_map, fp = FixedPoint(p.frac_bits())](std::size_t first, std::size_t count) {
        const std::size_t row = element_count(shape) / shape.at(0);
        const std::size_t r0 = first / row, r1 = (first + count + row - 1) / row;
        auto rows = source.rows(name, shape, r0, r1);
        if (!rows) throw Error(ErrorCode::invalid_argument, "weights: no tensor '" + name + "'");
        if (row_map) row_map(*rows);
        const RingTensor encoded = fp.encode(*rows);
        RingTensor out = RingTensor::from_shape({count});
        std::copy(encoded.data() + (first - r0 * row), encoded.data() + (first - r0 * row) + count, out.data());
        return out;
      };
    co_return co_await p.input_weight(owner, std::move(pieces), shape);
  } else {
    std::optional<RealTensor> value;
    if (mine) {
      value = source(name, shape);
      if (!value) throw Error(ErrorCode::invalid_argument, "weights: no tensor '" + name + "'");
      if (row_map) row_map(*value);
    }
    co_return co_await ops::secret_real(p, owner, std::move(value), shape);
  }
}

// One block. LLaMA: RMSNorm weights, no biases, SiLU-gated MLP (gate, up,
// down). GPT-2: LayerNorm weight + bias, biases everywhere, GeLU MLP (up =
// c_fc, down = c_proj; no gate).
template <Protocol P>
struct LayerWeights {
  using W = Weight<P>;
  W input_norm, post_norm;                       // (hidden)
  std::optional<W> input_norm_bias, post_norm_bias;
  W wq, wk, wv, wo;                              // [in, out]; wq carries 1/sqrt(head_dim)
  std::optional<W> bq, bk, bv, bo;               // (out); bq carries 1/sqrt(head_dim)
  std::optional<W> gate;                         // LLaMA only
  W up, down;                                    // [in, out]
  std::optional<W> b_up, b_down;
  // LLaMA: diag(input_norm) wq / 2^ranking_query_shift, so that h wq_ranking
  // = q rms(h) / 16 for the pre-norm hidden state h: the step's queries up
  // to a positive factor, rounds before the norm gives q (see
  // kv::EarlyRanking). The 1/16 keeps the sums of hidden states with
  // outlier features far from truncation's failure range.
  std::optional<W> wq_ranking;

  std::size_t resident_bytes() const {
    std::size_t bytes = 0;
    for (const W* w : {&input_norm, &post_norm, &wq, &wk, &wv, &wo, &up, &down}) bytes += weight_bytes<P>(*w);
    for (const std::optional<W>* w : {&input_norm_bias, &post_norm_bias, &bq, &bk, &bv, &bo, &gate, &b_up, &b_down, &wq_ranking})
      if (*w) bytes += weight_bytes<P>(**w);
    return bytes;
  }
};

inline constexpr int ranking_query_shift = 4;

template <Protocol P>
struct DecoderWeights {
  ModelConfig config;
  Weight<P> embed;                               // (vocab, hidden)
  std::optional<Weight<P>> positions;            // GPT-2: (max_positions, hidden)
  std::vector<LayerWeights<P>> layers;           // one per layer, or one for all (tied_layers)
  bool tied_layers = false;                      // see tie_layers()
  Weight<P> final_norm;                          // (hidden)
  std::optional<Weight<P>> final_norm_bias;
  Weight<P> lm_head;                             // (hidden, vocab)
  // Every write to the residual stream (embedding, positions, the output
  // projections and their biases) has rows of mean zero, so the stream's
  // rows do too and a LayerNorm need not compute its mean (load_gpt2).
  bool centered_residual = false;

  // Bytes of weights this party holds (rss3: 8 per weight, see CompactWeights).
  std::size_t resident_bytes() const {
    std::size_t bytes = weight_bytes<P>(embed) + weight_bytes<P>(final_norm) + weight_bytes<P>(lm_head);
    for (const auto* w : {&positions, &final_norm_bias})
      if (*w) bytes += weight_bytes<P>(**w);
    for (const auto& l : layers) bytes += l.resident_bytes();
    return bytes;
  }
};

// Cost benchmarks at real model shapes: every one of `layers` layers runs
// with the weights of layer 0, so that a 32-layer model needs the memory of
// one layer. MPC costs do not depend on weight values; outputs of such a
// model mean nothing.
template <Protocol P>
DecoderWeights<P> tie_layers(DecoderWeights<P> w, std::size_t layers) {
  if (w.layers.empty() || layers == 0)
    throw Error(ErrorCode::invalid_argument, "tie_layers: no layer weights to tie, or zero layers");
  w.layers.resize(1);
  w.tied_layers = true;
  w.config.num_layers = layers;
  return w;
}

namespace detail {
// Owner-side transform of an HF [out, in] matrix to [in, out], optionally scaled.
inline std::optional<RealTensor> transposed(std::optional<RealTensor> w, double scale = 1.0) {
  if (!w) return w;
  RealTensor t = transpose(*w);
  if (scale != 1.0)
    for (double& x : t) x *= scale;
  return t;
}

// Owner-side v * scale (a bias folded like its weights).
inline std::optional<RealTensor> scaled(std::optional<RealTensor> v, double scale) {
  if (v && scale != 1.0)
    for (double& x : *v) x *= scale;
  return v;
}

// An untied checkpoint must store its head (owner side).
inline void require_head(const WeightSource& source, const std::string& embed_name) {
  if (source.holds("lm_head.weight") == false)
    throw Error(ErrorCode::format, "weights: no 'lm_head.weight', and config.json says tie_word_embeddings is "
                                   "false (set it to true if the LM head is the embedding " + embed_name + ")");
}

// The LM head's (vocab, hidden) matrix: the embedding when tied, else
// lm_head.weight. A tied checkpoint may still store lm_head.weight (some
// exporters write both): it must then equal the embedding, as transformers
// would overwrite it with the embedding.
template <class Get>
std::optional<RealTensor> lm_head_rows(const ModelConfig& c, const WeightSource& source, Get& get,
                                       const std::optional<RealTensor>& embed, const std::string& embed_name) {
  const Shape shape{c.vocab_size, c.hidden_size};
  if (!c.tie_word_embeddings) {
    if (embed) require_head(source, embed_name);
    return get("lm_head.weight", shape);
  }
  if (embed && source.holds("lm_head.weight") == true) {
    const auto stored = get("lm_head.weight", shape);
    if (stored->size() != embed->size() ||  // both shape-checked
        !std::equal(stored->data(), stored->data() + stored->size(), embed->data()))
      throw Error(ErrorCode::format, "weights: 'lm_head.weight' differs from '" + embed_name +
                                         "', but config.json says tie_word_embeddings is true (set it to false "
                                         "to use lm_head.weight)");
  }
  return embed;
}

// A tied checkpoint that also stores lm_head.weight: it must equal the
// embedding (lm_head_rows' check), compared a block of rows at a time.
inline void check_tied_head(const WeightSource& source, const std::string& embed_name, const Shape& shape) {
  if (source.holds("lm_head.weight") != true) return;
  const std::size_t step = std::max<std::size_t>(1, (std::size_t{1} << 20) / std::max<std::size_t>(shape[1], 1));
  for (std::size_t r = 0; r < shape[0]; r += step) {
    const std::size_t end = std::min(shape[0], r + step);
    const auto head = source.rows("lm_head.weight", shape, r, end), embed = source.rows(embed_name, shape, r, end);
    if (!std::equal(head->data(), head->data() + head->size(), embed->data()))
      throw Error(ErrorCode::format, "weights: 'lm_head.weight' differs from '" + embed_name +
                                         "', but config.json says tie_word_embeddings is true (set it to false "
                                         "to use lm_head.weight)");
  }
}

// Owner-side diag(v) w scale: row i of an [in, out] matrix times v_i and scale.
inline std::optional<RealTensor> rows_scaled(const std::optional<RealTensor>& w, const std::optional<RealTensor>& v,
                                             double scale) {
  if (!w || !v) return std::nullopt;
  RealTensor out = *w;
  const std::size_t rows = out.shape()[0], cols = out.shape()[1];
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) out(r, c) *= (*v)(r) * scale;
  return out;
}
}  // namespace detail

namespace detail {
// The owner streams its checkpoint a layer at a time: with a protocol that
// paces (rss3: Rss3::confirm_weights), the others confirm each layer, and
// the owner, once it has sent layer l, waits for layer l-1's confirmation
// before it reads on: at most two layers' messages are in flight, so its
// outboxes never hold the model. The owner's last act stays a send (the
// last layer's confirmation is never waited for), so every party's round
// clock ends the load where it ended without pacing. Others do not pace.
template <Protocol P>
class OwnerPacing {
 public:
  OwnerPacing(P& p, PartyId owner) : p_(p), owner_(owner) {}
  Task<void> layer_done() {
    if constexpr (WeightPacing<P>) {
      if (!p_.holds_input(owner_)) p_.confirm_weights(owner_);
      else if (layers_++ > 0) co_await p_.weights_confirmed(owner_);
    }
  }

 private:
  P& p_;
  PartyId owner_;
  std::size_t layers_ = 0;
};
}  // namespace detail

template <Protocol P>
Task<DecoderWeights<P>> load_llama(P& p, const ModelConfig& c, const WeightSource& source,
                                 PartyId owner = 0) {
  if (c.architecture != Architecture::llama)
    throw Error(ErrorCode::invalid_argument, "load_llama: config is not a LLaMA model");
  const bool mine = p.holds_input(owner);
  auto get = [&](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
    if (!mine) return std::nullopt;
    auto v = source(name, shape);
    if (!v) throw Error(ErrorCode::invalid_argument, "weights: no tensor '" + name + "'");
    return v;
  };
  const std::size_t h = c.hidden_size, hd = c.head_dim, q_out = c.num_heads * hd,
                    kv_out = c.num_kv_heads * hd, inter = c.intermediate_size, v = c.vocab_size;
  const double qs = 1.0 / std::sqrt(double(hd));
  DecoderWeights<P> w;
  w.config = c;
  detail::OwnerPacing<P> pacing(p, owner);
  w.embed = co_await secret_weight_rows(p, owner, source, "model.embed_tokens.weight", {v, h});
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    LayerWeights<P> lw;
    auto input_norm = get(pre + "input_layernorm.weight", {h});
    lw.input_norm = co_await secret_weight(p, owner, input_norm, {h});
    lw.post_norm =
        co_await secret_weight(p, owner, get(pre + "post_attention_layernorm.weight", {h}), {h});
    auto wq = detail::transposed(get(pre + "self_attn.q_proj.weight", {q_out, h}), qs);
    lw.wq = co_await secret_weight(p, owner, wq, {h, q_out});
    lw.wq_ranking = co_await secret_weight(p, owner, detail::rows_scaled(wq, input_norm, std::ldexp(1.0, -ranking_query_shift)),
                                         {h, q_out});
    lw.wk = co_await secret_weight(p, owner, detail::transposed(get(pre + "self_attn.k_proj.weight", {kv_out, h})),
                                 {h, kv_out});
    lw.wv = co_await secret_weight(p, owner, detail::transposed(get(pre + "self_attn.v_proj.weight", {kv_out, h})),
                                 {h, kv_out});
    lw.wo = co_await secret_weight(p, owner, detail::transposed(get(pre + "self_attn.o_proj.weight", {h, q_out})),
                                 {q_out, h});
    if (c.qkv_bias) {  // Qwen2, LLaMA's attention_bias; q's carries 1/sqrt(head_dim) like wq
      lw.bq = co_await secret_weight(p, owner, detail::scaled(get(pre + "self_attn.q_proj.bias", {q_out}), qs), {q_out});
      lw.bk = co_await secret_weight(p, owner, get(pre + "self_attn.k_proj.bias", {kv_out}), {kv_out});
      lw.bv = co_await secret_weight(p, owner, get(pre + "self_attn.v_proj.bias", {kv_out}), {kv_out});
    }
    if (c.o_bias) lw.bo = co_await secret_weight(p, owner, get(pre + "self_attn.o_proj.bias", {h}), {h});
    lw.gate = co_await secret_weight(p, owner, detail::transposed(get(pre + "mlp.gate_proj.weight", {inter, h})),
                                   {h, inter});
    lw.up = co_await secret_weight(p, owner, detail::transposed(get(pre + "mlp.up_proj.weight", {inter, h})),
                                 {h, inter});
    lw.down = co_await secret_weight(p, owner, detail::transposed(get(pre + "mlp.down_proj.weight", {h, inter})),
                                   {inter, h});
    w.layers.push_back(std::move(lw));
    co_await pacing.layer_done();
  }
  w.final_norm = co_await secret_weight(p, owner, get("model.norm.weight", {h}), {h});
  if constexpr (CompactWeights<P>) {
    // The head is read transposed where the checkpoint stores it: the
    // embedding itself when tied (no second copy), else lm_head.weight as
    // it is, streamed by rows.
    if (c.tie_word_embeddings) {
      if (mine) detail::check_tied_head(source, "model.embed_tokens.weight", {v, h});
      w.lm_head = P::transposed(w.embed, true);
    } else {
      if (mine) detail::require_head(source, "model.embed_tokens.weight");
      w.lm_head = P::transposed(co_await secret_weight_rows(p, owner, source, "lm_head.weight", {v, h}), false);
    }
  } else {
    // The embedding is read again rather than held through the layers.
    const auto embed = get("model.embed_tokens.weight", {v, h});
    w.lm_head = co_await secret_weight(
        p, owner, detail::transposed(detail::lm_head_rows(c, source, get, embed, "model.embed_tokens.weight")), {h, v});
  }
  if (mine) source.finish();
  co_return w;
}

namespace detail {
// Columns [begin, end) of an [in, out] matrix or elements of a bias, scaled.
inline std::optional<RealTensor> columns(const std::optional<RealTensor>& w, std::size_t begin, std::size_t end,
                                         double scale = 1.0) {
  if (!w) return std::nullopt;
  const bool matrix = w->dimension() == 2;
  const std::size_t rows = matrix ? w->shape()[0] : 1, cols = matrix ? w->shape()[1] : w->shape()[0];
  RealTensor out = matrix ? RealTensor::from_shape({rows, end - begin}) : RealTensor::from_shape({end - begin});
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = begin; c < end; ++c) out.data()[r * (end - begin) + (c - begin)] = w->data()[r * cols + c] * scale;
  return out;
}
}  // namespace detail

namespace detail {
// w (..., h) with each row's mean over h subtracted (the owner's plaintext;
// nullopt elsewhere).
inline std::optional<RealTensor> rows_centered(std::optional<RealTensor> w) {
  if (!w) return w;
  const std::size_t h = w->shape().back(), rows = w->size() / h;
  for (std::size_t r = 0; r < rows; ++r) {
    double* row = w->data() + r * h;
    double mean = 0;
    for (std::size_t i = 0; i < h; ++i) mean += row[i];
    mean /= static_cast<double>(h);
    for (std::size_t i = 0; i < h; ++i) row[i] -= mean;
  }
  return w;
}
}  // namespace detail

// GPT-2 in Hugging Face layout (Conv1D weights are already [in, out]; the
// fused c_attn is split into q, k, v). Names may carry a "transformer."
// prefix (GPT2LMHeadModel) or not (GPT2Model, and the published gpt2
// checkpoint); the head is wte when tied (the default), else lm_head.weight.
//
// The owner centres every write to the residual stream (wte and wpe rows,
// both c_proj weights over their output axis, their biases): then each
// residual row has mean zero, LayerNorm(h) = (h / rms(h)) gamma + beta,
// and the private LayerNorm skips its mean, a round alone under exact
// truncation (SliceGPT's computational invariance, Ashkboos et al. 2024).
// The function is the same: LayerNorm removes any row mean, and the head
// reads wte as stored. Only the residual stream's values differ.
template <Protocol P>
Task<DecoderWeights<P>> load_gpt2(P& p, const ModelConfig& c, const WeightSource& source, PartyId owner = 0) {
  if (c.architecture != Architecture::gpt2)
    throw Error(ErrorCode::invalid_argument, "load_gpt2: config is not a GPT-2 model");
  const bool mine = p.holds_input(owner);
  // Random sources answer any name: they take the prefixed layout.
  const bool bare = mine && source.holds("wte.weight") == true && source.holds("transformer.wte.weight") != true;
  const std::string prefix = bare ? "" : "transformer.";
  auto get = [&](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
    if (!mine) return std::nullopt;
    auto v = source(prefix + name, shape);
    if (!v) throw Error(ErrorCode::invalid_argument, "weights: no tensor '" + prefix + name + "'");
    return v;
  };
  const std::size_t h = c.hidden_size, v = c.vocab_size, inter = c.intermediate_size;
  const double qs = 1.0 / std::sqrt(double(c.head_dim));
  DecoderWeights<P> w;
  w.config = c;
  detail::OwnerPacing<P> pacing(p, owner);
  w.centered_residual = true;
  w.embed = co_await secret_weight_rows(p, owner, source, prefix + "wte.weight", {v, h},
                                        [](RealTensor& rows) { rows = *detail::rows_centered(std::move(rows)); });
  w.positions = co_await secret_weight(p, owner, detail::rows_centered(get("wpe.weight", {c.max_positions, h})),
                                       {c.max_positions, h});
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const std::string pre = "h." + std::to_string(l) + ".";
    LayerWeights<P> lw;
    lw.input_norm = co_await secret_weight(p, owner, get(pre + "ln_1.weight", {h}), {h});
    lw.input_norm_bias = co_await secret_weight(p, owner, get(pre + "ln_1.bias", {h}), {h});
    auto attn_w = get(pre + "attn.c_attn.weight", {h, 3 * h});
    auto attn_b = get(pre + "attn.c_attn.bias", {3 * h});
    lw.wq = co_await secret_weight(p, owner, detail::columns(attn_w, 0, h, qs), {h, h});
    lw.wk = co_await secret_weight(p, owner, detail::columns(attn_w, h, 2 * h), {h, h});
    lw.wv = co_await secret_weight(p, owner, detail::columns(attn_w, 2 * h, 3 * h), {h, h});
    lw.bq = co_await secret_weight(p, owner, detail::columns(attn_b, 0, h, qs), {h});
    lw.bk = co_await secret_weight(p, owner, detail::columns(attn_b, h, 2 * h), {h});
    lw.bv = co_await secret_weight(p, owner, detail::columns(attn_b, 2 * h, 3 * h), {h});
    lw.wo = co_await secret_weight(p, owner, detail::rows_centered(get(pre + "attn.c_proj.weight", {h, h})), {h, h});
    lw.bo = co_await secret_weight(p, owner, detail::rows_centered(get(pre + "attn.c_proj.bias", {h})), {h});
    lw.post_norm = co_await secret_weight(p, owner, get(pre + "ln_2.weight", {h}), {h});
    lw.post_norm_bias = co_await secret_weight(p, owner, get(pre + "ln_2.bias", {h}), {h});
    lw.up = co_await secret_weight(p, owner, get(pre + "mlp.c_fc.weight", {h, inter}), {h, inter});
    lw.b_up = co_await secret_weight(p, owner, get(pre + "mlp.c_fc.bias", {inter}), {inter});
    lw.down = co_await secret_weight(p, owner, detail::rows_centered(get(pre + "mlp.c_proj.weight", {inter, h})),
                                   {inter, h});
    lw.b_down = co_await secret_weight(p, owner, detail::rows_centered(get(pre + "mlp.c_proj.bias", {h})), {h});
    w.layers.push_back(std::move(lw));
    co_await pacing.layer_done();
  }
  w.final_norm = co_await secret_weight(p, owner, get("ln_f.weight", {h}), {h});
  w.final_norm_bias = co_await secret_weight(p, owner, get("ln_f.bias", {h}), {h});
  if constexpr (CompactWeights<P>) {
    // The head reads wte as stored (the embedding is centred): a second
    // matrix, streamed by rows and read transposed.
    if (mine && c.tie_word_embeddings) detail::check_tied_head(source, prefix + "wte.weight", {v, h});
    if (mine && !c.tie_word_embeddings) detail::require_head(source, prefix + "wte.weight");
    const std::string head = c.tie_word_embeddings ? prefix + "wte.weight" : "lm_head.weight";
    w.lm_head = P::transposed(co_await secret_weight_rows(p, owner, source, head, {v, h}), false);
  } else {
    auto unprefixed = [&](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
      if (!mine) return std::nullopt;
      auto t = source(name, shape);
      if (!t) throw Error(ErrorCode::invalid_argument, "weights: no tensor '" + name + "'");
      return t;
    };
    // The embedding is read again rather than held through the layers.
    const auto wte = get("wte.weight", {v, h});
    w.lm_head = co_await secret_weight(
        p, owner, detail::transposed(detail::lm_head_rows(c, source, unprefixed, wte, prefix + "wte.weight")), {h, v});
  }
  if (mine) source.finish();
  co_return w;
}

// Either architecture, by config.
template <Protocol P>
Task<DecoderWeights<P>> load_decoder(P& p, const ModelConfig& c, const WeightSource& source, PartyId owner = 0) {
  if (c.architecture == Architecture::gpt2) co_return co_await load_gpt2(p, c, source, owner);
  co_return co_await load_llama(p, c, source, owner);
}

}  // namespace mpcache

// Compiled once, in src/model/instantiate_*.cpp (one file per backend).
namespace mpcache {
#define MPCACHE_EXTERN_LOAD_DECODER(B) \
  extern template Task<DecoderWeights<B>> load_decoder<B>(B&, const ModelConfig&, const WeightSource&, PartyId);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_EXTERN_LOAD_DECODER)
#undef MPCACHE_EXTERN_LOAD_DECODER
}  // namespace mpcache
