module;
#include "prelude.hpp"
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <set>
#include <sstream>
#include "json_reader.hpp"
module mpcache.model;
import mpcache.core;

namespace mpcache {

ModelConfig ModelConfig::from_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::io, path.string() + ": cannot open (missing or unreadable)");
  std::stringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), path.string());
}

namespace {
using json_reader::Scalar;
using Kind = Scalar::Kind;

// Keys Hugging Face configs carry that do not change what the model
// computes at inference: names, versions, dtypes of the stored weights
// (read from the safetensors header instead), token ids (the tokenizer's
// business), dropout and initialisation (training only), head-of-task
// settings, the tensor-parallel split of pretraining_tp (the same sums).
bool harmless_key(const std::string& k) {
  static const std::set<std::string> keys{
      "_name_or_path", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype",
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
      "tokenizer_class", "use_cache", "initializer_range", "attention_dropout", "resid_pdrop", "embd_pdrop",
      "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
      "summary_first_dropout", "task_specific_params", "n_ctx", "output_attentions", "output_hidden_states",
      "return_dict", "id2label", "label2id", "torchscript", "pretraining_tp", "keys_to_ignore_at_inference",
      "is_llama_config", "reorder_and_upcast_attn", "_attn_implementation_autoset", "problem_type",
      "finetuning_task", "max_window_layers"};
  return keys.count(k) != 0;
}

struct Reader {
  std::map<std::string, Scalar> j;
  std::string origin;
  std::set<std::string> read;  // keys looked at

  [[noreturn]] void fail(const std::string& what) const { throw Error(ErrorCode::format, origin + ": " + what); }
  bool has(const std::string& k) {
    read.insert(k);
    return j.count(k) && j.at(k).kind != Kind::null;
  }
  std::size_t size(std::initializer_list<const char*> keys, bool required) {
    for (const char* k : keys)
      if (has(k)) {
        if (j.at(k).kind != Kind::integer || j.at(k).integer <= 0) fail(std::string("'") + k + "' must be a positive integer");
        return static_cast<std::size_t>(j.at(k).integer);
      }
    if (required) fail("missing '" + std::string(*keys.begin()) + "'");
    return 0;
  }
  double number(const std::string& k, double fallback) {
    if (!has(k)) return fallback;
    if (j.at(k).kind != Kind::number && j.at(k).kind != Kind::integer) fail("'" + k + "' must be a number");
    return j.at(k).number;
  }
  bool flag(const std::string& k, bool fallback) {
    if (!has(k)) return fallback;
    if (j.at(k).kind != Kind::boolean) fail("'" + k + "' must be true or false");
    return j.at(k).boolean;
  }
  std::string text(const std::string& k, const std::string& fallback) {
    if (!has(k)) return fallback;
    if (j.at(k).kind != Kind::string) fail("'" + k + "' must be a string");
    return j.at(k).text;
  }
  // A key that must hold `expected` (or be absent): other values change the computation.
  void require_flag(const std::string& k, bool expected, const std::string& why) {
    if (flag(k, expected) != expected) fail("'" + k + "': " + (expected ? "false" : "true") + " is not supported (" + why + ")");
  }
  void require_one_of(const std::string& k, std::initializer_list<const char*> allowed, const std::string& fallback,
                      const std::string& why) {
    const std::string v = text(k, fallback);
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    fail("'" + k + "' is '" + v + "': only " + list + " are supported (" + why + ")");
  }
  // Every key was read or is harmless.
  void refuse_unknown_keys() const {
    for (const auto& [k, v] : j)
      if (!read.count(k) && !harmless_key(k))
        fail("key '" + k + "' is not known to mpcache; it may change what the model computes, so the model is "
             "refused rather than run differently");
  }
};

// rope_scaling: null, {"rope_type" (or legacy "type"): "default" | "linear" | "llama3", ...}.
void read_rope_scaling(Reader& r, ModelConfig& c) {
  if (!r.has("rope_scaling")) return;
  const Scalar& v = r.j.at("rope_scaling");
  if (v.kind != Kind::object) r.fail("'rope_scaling' must be an object or null");
  Reader s{json_reader::parse_flat_object(v.text), r.origin + ": rope_scaling", {}};
  std::string type = s.text("rope_type", "");
  if (type.empty()) type = s.text("type", "");
  if (type.empty()) s.fail("no 'rope_type'");
  if (type == "default") {
    c.rope_scaling = RopeScaling::none;
  } else if (type == "linear") {
    c.rope_scaling = RopeScaling::linear;
    c.rope_factor = s.number("factor", 0);
    if (!(c.rope_factor > 0)) s.fail("'factor' must be a positive number");
  } else if (type == "llama3") {
    c.rope_scaling = RopeScaling::llama3;
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor"})
      if (!s.has(k)) s.fail(std::string("missing '") + k + "'");
    c.rope_factor = s.number("factor", 0);
    c.rope_low_freq_factor = s.number("low_freq_factor", 0);
    c.rope_high_freq_factor = s.number("high_freq_factor", 0);
    c.rope_original_max_positions = s.size({"original_max_position_embeddings"}, true);
    if (!(c.rope_factor > 0) || !(c.rope_low_freq_factor > 0) || !(c.rope_high_freq_factor > c.rope_low_freq_factor))
      s.fail("needs factor > 0 and 0 < low_freq_factor < high_freq_factor");
  } else {
    s.fail("rope type '" + type + "' is not supported (linear and llama3 are)");
  }
  // attention_factor, beta_fast, mscale, ...: other types' keys; here they would be ignored by
  // transformers too, but a key we do not read may mean a file for another definition.
  for (const auto& [k, unused] : s.j)
    if (!s.read.count(k)) s.fail("key '" + k + "' is not known for rope type '" + type + "'");
}

// A sliding window changes attention once a sequence outgrows it; we attend
// over every position, which equals it only while the window covers them all.
void check_sliding_window(Reader& r, const ModelConfig& c, bool in_use) {
  const std::size_t window = r.size({"sliding_window"}, false);
  if (!in_use || window == 0 || window >= c.max_positions) return;
  r.fail("'sliding_window' " + std::to_string(window) + " is shorter than max_position_embeddings " +
         std::to_string(c.max_positions) +
         ": sliding-window attention is not supported (set max_position_embeddings to at most the window "
         "to run the positions where it does not apply)");
}

void read_llama_family(Reader& r, ModelConfig& c, const std::string& type) {
  c.architecture = Architecture::llama;
  c.hidden_size = r.size({"hidden_size"}, true);
  c.intermediate_size = r.size({"intermediate_size"}, true);
  c.num_layers = r.size({"num_hidden_layers"}, true);
  c.num_heads = r.size({"num_attention_heads"}, true);
  c.num_kv_heads = r.size({"num_key_value_heads"}, false);
  if (!c.num_kv_heads) c.num_kv_heads = c.num_heads;
  c.max_positions = r.size({"max_position_embeddings"}, true);
  c.norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.number("rope_theta", 10000.0);
  c.tie_word_embeddings = r.flag("tie_word_embeddings", false);
  r.require_one_of("hidden_act", {"silu", "swish"}, "silu", "the gated MLP computes SiLU");
  read_rope_scaling(r, c);
  if (r.number("partial_rotary_factor", 1.0) != 1.0)
    r.fail("'partial_rotary_factor' other than 1 is not supported (RoPE rotates every dimension)");
  r.require_flag("rope_interleaved", false, "RoPE pairs dimension i with i + head_dim/2");
  r.require_flag("mlp_bias", false, "the MLP projections have no biases");
  if (type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's q, k and v projections always have biases, o_proj none
    r.require_flag("use_mrope", false, "RoPE over one position axis");
    const bool sliding = r.flag("use_sliding_window", false);
    if (r.has("layer_types") && r.j.at("layer_types").text.find("sliding_attention") != std::string::npos)
      check_sliding_window(r, c, true);
    check_sliding_window(r, c, sliding);
  } else {
    c.qkv_bias = c.o_bias = r.flag("attention_bias", false);
    if (type == "mistral") check_sliding_window(r, c, true);
  }
  if (r.has("layer_types") && r.j.at("layer_types").kind != Kind::array) r.fail("'layer_types' must be a list");
}

void read_gpt2(Reader& r, ModelConfig& c) {
  c.architecture = Architecture::gpt2;
  c.hidden_size = r.size({"n_embd", "hidden_size"}, true);
  c.num_layers = r.size({"n_layer", "num_hidden_layers"}, true);
  c.num_heads = r.size({"n_head", "num_attention_heads"}, true);
  c.num_kv_heads = c.num_heads;
  c.intermediate_size = r.size({"n_inner"}, false);
  if (!c.intermediate_size) c.intermediate_size = 4 * c.hidden_size;
  c.max_positions = r.size({"n_positions", "max_position_embeddings"}, true);
  c.norm_eps = r.number("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = r.flag("tie_word_embeddings", true);
  // The decoder computes the erf GeLU; GPT-2's tanh form (gelu_new) differs by < 3e-4.
  r.require_one_of("activation_function", {"gelu_new", "gelu", "gelu_pytorch_tanh"}, "gelu_new",
                   "the MLP computes GeLU");
  r.require_flag("scale_attn_weights", true, "scores are scaled by 1/sqrt(head_dim)");
  r.require_flag("scale_attn_by_inverse_layer_idx", false, "no per-layer score scaling");
  r.require_flag("add_cross_attention", false, "a decoder-only model");
}
}  // namespace

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& origin) {
  Reader r{{}, origin, {}};
  try {
    r.j = json_reader::parse_flat_object(text);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::format, origin + ": not a JSON object: " + e.what());
  }
  ModelConfig c;
  c.model_type = r.text("model_type", "llama");
  if (c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2") {
    read_llama_family(r, c, c.model_type);
  } else if (c.model_type == "gpt2") {
    read_gpt2(r, c);
  } else {
    r.fail("model_type '" + c.model_type + "' is not supported (llama, mistral, qwen2 and gpt2 are)");
  }
  c.vocab_size = r.size({"vocab_size"}, true);
  c.head_dim = r.size({"head_dim"}, false);
  if (!c.head_dim) {
    if (c.hidden_size % c.num_heads)
      r.fail("hidden size " + std::to_string(c.hidden_size) + " is not a multiple of " + std::to_string(c.num_heads) +
             " heads");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.architecture == Architecture::gpt2 && c.head_dim * c.num_heads != c.hidden_size)
    r.fail("head_dim " + std::to_string(c.head_dim) + " times " + std::to_string(c.num_heads) +
           " heads is not GPT-2's hidden size " + std::to_string(c.hidden_size));
  if (c.num_heads % c.num_kv_heads)
    r.fail(std::to_string(c.num_heads) + " heads cannot share " + std::to_string(c.num_kv_heads) +
           " key/value heads evenly");
  if (c.architecture == Architecture::llama && c.head_dim % 2)
    r.fail("head_dim " + std::to_string(c.head_dim) + " is odd: RoPE needs pairs");
  if (!(c.norm_eps > 0)) r.fail("the normalisation epsilon must be positive");
  if (!(c.rope_theta > 0)) r.fail("'rope_theta' must be positive");
  r.refuse_unknown_keys();
  return c;
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  const std::size_t half = head_dim / 2;
  std::vector<double> inv(half);
  for (std::size_t i = 0; i < half; ++i) {
    double f = std::pow(rope_theta, -2.0 * double(i) / double(head_dim));
    if (rope_scaling == RopeScaling::linear) {
      f /= rope_factor;  // positions divided by the factor
    } else if (rope_scaling == RopeScaling::llama3) {
      // Wavelengths shorter than original/high_freq_factor keep their
      // frequency, longer than original/low_freq_factor divide it by the
      // factor, and between the two blend linearly in original/wavelength.
      const double wavelen = 2.0 * std::numbers::pi / f, original = double(rope_original_max_positions);
      const double low_wavelen = original / rope_low_freq_factor, high_wavelen = original / rope_high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= rope_factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth =
            (original / wavelen - rope_low_freq_factor) / (rope_high_freq_factor - rope_low_freq_factor);
        f = (1.0 - smooth) * f / rope_factor + smooth * f;
      }
    }
    inv[i] = f;
  }
  return inv;
}

std::uint64_t ModelConfig::digest() const {
  // FNV-1a over every field as 64 bits, in declaration order (a new field
  // belongs here too); doubles by their bits, as parsed.
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      h ^= (word >> (8 * i)) & 0xFF;
      h *= 0x100000001b3ull;
    }
  };
  auto bits = [](double x) {
    std::uint64_t w;
    std::memcpy(&w, &x, sizeof w);
    return w;
  };
  mix(static_cast<std::uint64_t>(architecture));
  for (std::size_t n : {vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim,
                        max_positions})
    mix(n);
  mix(bits(norm_eps));
  mix(bits(rope_theta));
  mix(tie_word_embeddings ? 1 : 0);
  mix(static_cast<std::uint64_t>(rope_scaling));
  for (double x : {rope_factor, rope_low_freq_factor, rope_high_freq_factor}) mix(bits(x));
  mix(rope_original_max_positions);
  mix((qkv_bias ? 1 : 0) | (o_bias ? 2 : 0));
  return h;
}

std::string ModelConfig::summary() const {
  std::ostringstream out;
  out << (architecture == Architecture::gpt2 ? "gpt2" : "llama") << ", layers " << num_layers << ", hidden "
      << hidden_size << ", heads " << num_heads << " (KV " << num_kv_heads << ") of " << head_dim << ", MLP "
      << intermediate_size << ", vocabulary " << vocab_size << ", positions " << max_positions;
  if (model_type == "qwen2" || model_type == "mistral") out << " (" << model_type << ")";
  if (rope_scaling == RopeScaling::linear) out << ", RoPE linear x" << rope_factor;
  if (rope_scaling == RopeScaling::llama3) out << ", RoPE llama3 x" << rope_factor;
  if (qkv_bias) out << (o_bias ? ", q/k/v/o biases" : ", q/k/v biases");
  return out.str();
}

std::size_t ModelConfig::weight_count() const {
  const std::size_t h = hidden_size, v = vocab_size, f = intermediate_size;
  const std::size_t head = tie_word_embeddings ? 0 : v * h;
  if (architecture == Architecture::gpt2) {
    // wte, wpe; per layer ln_1, ln_2 (weight, bias), c_attn, c_proj, c_fc, c_proj with biases; ln_f.
    const std::size_t layer = 4 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h);
    return v * h + max_positions * h + num_layers * layer + 2 * h + head;
  }
  const std::size_t q = num_heads * head_dim, kv = num_kv_heads * head_dim;
  std::size_t layer = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * f;
  if (qkv_bias) layer += q + 2 * kv;
  if (o_bias) layer += h;
  return v * h + num_layers * layer + h + head;
}

}  // namespace mpcache
