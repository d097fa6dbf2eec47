// Model configuration from a Hugging Face config.json (LLaMA or GPT-2 keys).
export module mpcache.model:config;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

enum class Architecture { llama, gpt2 };

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
};

}  // namespace mpcache
