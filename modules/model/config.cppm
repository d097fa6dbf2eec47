// Model configuration from a Hugging Face config.json: model_type llama,
// mistral, qwen2 (LLaMA with small differences) or gpt2. Every key either
// is read, or is on an explicit list of keys that do not change the
// computation (architectures, torch_dtype, token ids, dropout rates, ...);
// any other key, and any value we do not compute (hidden_act relu,
// mlp_bias true, a rope_scaling type other than linear and llama3, a
// sliding window shorter than the positions) is an Error naming it.
export module mpcache.model:config;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

enum class Architecture { llama, gpt2 };

// RoPE frequency scaling ("rope_scaling"), as Hugging Face transformers
// defines it (_compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters).
enum class RopeScaling { none, linear, llama3 };

struct ModelConfig {
  Architecture architecture = Architecture::llama;
  std::size_t vocab_size = 0;
  std::size_t hidden_size = 0;
  std::size_t intermediate_size = 0;
  std::size_t num_layers = 0;
  std::size_t num_heads = 0;
  std::size_t num_kv_heads = 0;
  std::size_t head_dim = 0;
  std::size_t max_positions = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 1.0;            // linear, llama3: "factor"
  double rope_low_freq_factor = 1.0;   // llama3
  double rope_high_freq_factor = 4.0;  // llama3
  std::size_t rope_original_max_positions = 0;  // llama3: "original_max_position_embeddings"
  // Biases on the attention projections: LLaMA's attention_bias puts them
  // on q, k, v and o; Qwen2 has them on q, k and v. (GPT-2 always has them.)
  bool qkv_bias = false;
  bool o_bias = false;
  std::string model_type = "llama";  // as written in config.json, for messages

  // RoPE's inverse frequencies, head_dim / 2 of them, theta^(-2i/d) then
  // rope_scaling's adjustment, in float64.
  std::vector<double> rope_inv_freq() const;

  // Reads and validates (positive sizes, heads dividing evenly).
  static ModelConfig from_json_file(const std::filesystem::path& path);
  static ModelConfig from_json_text(const std::string& text, const std::string& origin);

  // A digest of the fields above, which fix every public shape of a job:
  // parties compare it before any traffic depends on the shapes. It is of
  // the parsed fields, not the file's bytes, so two files that differ only
  // in layout, key order, key spelling (GPT-2's n_layer or
  // num_hidden_layers) or keys we do not read give the same digest.
  std::uint64_t digest() const;
  // "llama, layers 2, hidden 16, ...": the fields, for messages.
  std::string summary() const;
  // Weights of the checkpoint as published (a tied head counted once):
  // what "bytes per weight" divides by.
  std::size_t weight_count() const;
};

}  // namespace mpcache
