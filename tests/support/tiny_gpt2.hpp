// Test support: a tiny GPT-2 config (vocabulary 64, hidden 24, 2 layers, 3
// heads, 48 positions). Include after `import mpcache;`.
#pragma once

namespace mpcache::testing {
inline ModelConfig tiny_gpt2() {
  return ModelConfig::from_json_text(
      R"({"model_type": "gpt2", "vocab_size": 64, "n_embd": 24, "n_layer": 2, "n_head": 3,
          "n_positions": 48, "layer_norm_epsilon": 1e-5})",
      "tiny gpt2");
}
}  // namespace mpcache::testing
