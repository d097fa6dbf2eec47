// Weights as secret inputs. A WeightSource gives the model owner the real
// values of a named tensor (Hugging Face names and [out, in] layout); other
// parties get nullopt and only learn the shape. Sources: a safetensors file,
// or deterministic random weights for any config (benches, tests).
module;
#include "prelude.hpp"
export module mpcache.model:weights;
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
import :safetensors;
import :config;

export namespace mpcache {

using WeightSource =
    std::function<std::optional<xt::xarray<double>>(const std::string& name, const Shape& shape)>;

// Loads (and shape-checks) tensors from one safetensors file, kept open.
WeightSource weights_from_file(const std::filesystem::path& path);
// N(0, scale^2)-like values (uniform with that standard deviation); norm
// weights ("...norm.weight") are 1 + small noise. Same seed, same weights.
WeightSource random_weights(std::uint64_t seed, double scale = 0.02);
// For parties that do not own the weights.
WeightSource no_weights();

// A secret tensor from `owner`'s real values (fixed-point encoded; Ref keeps
// float64).
template <Protocol P>
Task<typename P::Share> secret_real(P& p, PartyId owner, std::optional<xt::xarray<double>> value,
                                    const Shape& shape) {
  if constexpr (NativeReal<P>) {
    if (!value) throw Error(ErrorCode::invalid_argument, "ref: weights must be given");
    co_return p.from_real(*value);
  } else {
    std::optional<RingTensor> encoded;
    if (value) encoded = FixedPoint(p.frac_bits()).encode(*value);
    co_return co_await p.input(owner, std::move(encoded), shape);
  }
}

template <Protocol P>
struct LlamaLayerWeights {
  typename P::Share input_norm, post_norm;  // (hidden)
  typename P::Share wq, wk, wv, wo;         // [in, out]; wq carries 1/sqrt(head_dim)
  typename P::Share gate, up, down;         // [in, out]
};

template <Protocol P>
struct LlamaWeights {
  ModelConfig config;
  typename P::Share embed;       // (vocab, hidden)
  std::vector<LlamaLayerWeights<P>> layers;
  typename P::Share final_norm;  // (hidden)
  typename P::Share lm_head;     // (hidden, vocab)
};

namespace detail {
// Owner-side transform of an HF [out, in] matrix to [in, out], optionally scaled.
inline std::optional<xt::xarray<double>> transposed(std::optional<xt::xarray<double>> w,
                                                    double scale = 1.0) {
  if (!w) return w;
  xt::xarray<double> t = xt::transpose(*w);
  if (scale != 1.0) t *= scale;
  return t;
}
}  // namespace detail

template <Protocol P>
Task<LlamaWeights<P>> load_llama(P& p, const ModelConfig& c, const WeightSource& source,
                                 PartyId owner = 0) {
  if (c.architecture != Architecture::llama)
    throw Error(ErrorCode::invalid_argument, "load_llama: config is not a LLaMA model");
  const bool mine = p.holds_input(owner);
  auto get = [&](const std::string& name, const Shape& shape) -> std::optional<xt::xarray<double>> {
    if (!mine) return std::nullopt;
    auto v = source(name, shape);
    if (!v) throw Error(ErrorCode::invalid_argument, "weights: no tensor '" + name + "'");
    return v;
  };
  const std::size_t h = c.hidden_size, hd = c.head_dim, q_out = c.num_heads * hd,
                    kv_out = c.num_kv_heads * hd, inter = c.intermediate_size, v = c.vocab_size;
  LlamaWeights<P> w;
  w.config = c;
  w.embed = co_await secret_real(p, owner, get("model.embed_tokens.weight", {v, h}), {v, h});
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    LlamaLayerWeights<P> lw;
    lw.input_norm = co_await secret_real(p, owner, get(pre + "input_layernorm.weight", {h}), {h});
    lw.post_norm =
        co_await secret_real(p, owner, get(pre + "post_attention_layernorm.weight", {h}), {h});
    lw.wq = co_await secret_real(
        p, owner, detail::transposed(get(pre + "self_attn.q_proj.weight", {q_out, h}), 1.0 / std::sqrt(double(hd))),
        {h, q_out});
    lw.wk = co_await secret_real(p, owner, detail::transposed(get(pre + "self_attn.k_proj.weight", {kv_out, h})),
                                 {h, kv_out});
    lw.wv = co_await secret_real(p, owner, detail::transposed(get(pre + "self_attn.v_proj.weight", {kv_out, h})),
                                 {h, kv_out});
    lw.wo = co_await secret_real(p, owner, detail::transposed(get(pre + "self_attn.o_proj.weight", {h, q_out})),
                                 {q_out, h});
    lw.gate = co_await secret_real(p, owner, detail::transposed(get(pre + "mlp.gate_proj.weight", {inter, h})),
                                   {h, inter});
    lw.up = co_await secret_real(p, owner, detail::transposed(get(pre + "mlp.up_proj.weight", {inter, h})),
                                 {h, inter});
    lw.down = co_await secret_real(p, owner, detail::transposed(get(pre + "mlp.down_proj.weight", {h, inter})),
                                   {inter, h});
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = co_await secret_real(p, owner, get("model.norm.weight", {h}), {h});
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  w.lm_head = co_await secret_real(p, owner, detail::transposed(get(head, {v, h})), {h, v});
  co_return w;
}

}  // namespace mpcache
