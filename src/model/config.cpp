module;
#include "prelude.hpp"
#include <filesystem>
#include <fstream>
#include <map>
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

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& origin) {
  std::map<std::string, json_reader::Scalar> j;
  try {
    j = json_reader::parse_flat_object(text);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::format, origin + ": not a JSON object: " + e.what());
  }
  using Kind = json_reader::Scalar::Kind;
  auto has = [&](const char* k) { return j.count(k) && j.at(k).kind != Kind::null; };
  auto size = [&](std::initializer_list<const char*> keys, bool required) -> std::size_t {
    for (const char* k : keys)
      if (has(k)) {
        if (j.at(k).kind != Kind::integer || j.at(k).integer <= 0)
          throw Error(ErrorCode::format, origin + ": '" + k + "' must be a positive integer");
        return static_cast<std::size_t>(j.at(k).integer);
      }
    if (required)
      throw Error(ErrorCode::format, origin + ": missing '" + std::string(*keys.begin()) + "'");
    return 0;
  };
  auto number = [&](const char* k, double fallback) {
    if (!has(k)) return fallback;
    if (j.at(k).kind != Kind::number && j.at(k).kind != Kind::integer)
      throw Error(ErrorCode::format, origin + ": '" + k + "' must be a number");
    return j.at(k).number;
  };
  auto flag = [&](const char* k, bool fallback) {
    if (!has(k)) return fallback;
    if (j.at(k).kind != Kind::boolean)
      throw Error(ErrorCode::format, origin + ": '" + k + "' must be true or false");
    return j.at(k).boolean;
  };
  ModelConfig c;
  const std::string type = has("model_type") ? j.at("model_type").text : std::string("llama");
  if (type == "llama") {
    c.architecture = Architecture::llama;
    c.hidden_size = size({"hidden_size"}, true);
    c.intermediate_size = size({"intermediate_size"}, true);
    c.num_layers = size({"num_hidden_layers"}, true);
    c.num_heads = size({"num_attention_heads"}, true);
    c.num_kv_heads = size({"num_key_value_heads"}, false);
    if (!c.num_kv_heads) c.num_kv_heads = c.num_heads;
    c.max_positions = size({"max_position_embeddings"}, true);
    c.norm_eps = number("rms_norm_eps", 1e-6);
    c.rope_theta = number("rope_theta", 10000.0);
    c.tie_word_embeddings = flag("tie_word_embeddings", false);
  } else if (type == "gpt2") {
    c.architecture = Architecture::gpt2;
    c.hidden_size = size({"n_embd", "hidden_size"}, true);
    c.num_layers = size({"n_layer", "num_hidden_layers"}, true);
    c.num_heads = size({"n_head", "num_attention_heads"}, true);
    c.num_kv_heads = c.num_heads;
    c.intermediate_size = size({"n_inner"}, false);
    if (!c.intermediate_size) c.intermediate_size = 4 * c.hidden_size;
    c.max_positions = size({"n_positions", "max_position_embeddings"}, true);
    c.norm_eps = number("layer_norm_epsilon", 1e-5);
    c.tie_word_embeddings = true;
  } else {
    throw Error(ErrorCode::format, origin + ": model_type '" + type + "' is not llama or gpt2");
  }
  c.vocab_size = size({"vocab_size"}, true);
  c.head_dim = size({"head_dim"}, false);
  if (!c.head_dim) {
    if (c.hidden_size % c.num_heads)
      throw Error(ErrorCode::format, origin + ": hidden size " + std::to_string(c.hidden_size) +
                                         " is not a multiple of " + std::to_string(c.num_heads) +
                                         " heads");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads)
    throw Error(ErrorCode::format, origin + ": " + std::to_string(c.num_heads) +
                                       " heads cannot share " + std::to_string(c.num_kv_heads) +
                                       " key/value heads evenly");
  if (!(c.norm_eps > 0))
    throw Error(ErrorCode::format, origin + ": the normalisation epsilon must be positive");
  return c;
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
  return h;
}

std::string ModelConfig::summary() const {
  std::ostringstream out;
  out << (architecture == Architecture::gpt2 ? "gpt2" : "llama") << ", layers " << num_layers << ", hidden "
      << hidden_size << ", heads " << num_heads << " (KV " << num_kv_heads << ") of " << head_dim << ", MLP "
      << intermediate_size << ", vocabulary " << vocab_size << ", positions " << max_positions;
  return out.str();
}

}  // namespace mpcache
