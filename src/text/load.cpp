// A model folder: which tokenizer files it has, and its BOS/EOS.
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <system_error>
#include <nlohmann/json.hpp>
module mpcache.text;
import mpcache.std;
import :files;

namespace mpcache::text {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// "bos_token": "<s>" | {"content": "<s>", ...} | null
std::optional<std::string> token_name(const json& cfg, const char* key, const fs::path& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw TokenizerError(file.string() + ": \"" + key + "\" is neither a string nor {\"content\": ...}: " + v.dump());
}

// "eos_token_id": 2 | [128001, 128009] | null
std::vector<TokenId> token_ids(const json& cfg, const char* key, const fs::path& file, const Tokenizer& tok) {
  std::vector<TokenId> ids;
  if (!cfg.contains(key) || cfg[key].is_null()) return ids;
  const json& v = cfg[key];
  const json list = v.is_array() ? v : json::array({v});
  for (const json& x : list) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < 0 ||
        static_cast<std::uint64_t>(x.get<std::int64_t>()) >= tok.vocab_size())
      throw TokenizerError(file.string() + ": \"" + key + "\": " + x.dump() +
                           " is not a token id of the tokenizer (vocabulary size " + std::to_string(tok.vocab_size()) + ")");
    ids.push_back(static_cast<TokenId>(x.get<std::int64_t>()));
  }
  return ids;
}

TokenId id_of(const Tokenizer& tok, const std::string& name, const char* key, const fs::path& file) {
  const auto id = tok.token_to_id(name);
  if (!id) throw TokenizerError(file.string() + ": \"" + key + "\" names \"" + name + "\", which is not a token of the tokenizer");
  return *id;
}

void add_unique(std::vector<TokenId>& ids, const std::vector<TokenId>& more) {
  for (TokenId id : more)
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

// BOS: tokenizer_config.json / special_tokens_map.json name it, else
// config.json / generation_config.json give its id; what the tokenizer files
// said stays otherwise. EOS: all of those together (generation stops at any).
void apply_model_config(const fs::path& dir, Tokenizer& tok) {
  std::optional<TokenId> bos;
  std::vector<TokenId> eos;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path file = dir / name;
    if (!is_file(file)) continue;
    const json cfg = detail::read_json_file(file);
    if (!cfg.is_object()) throw TokenizerError(file.string() + ": expected a JSON object");
    if (!bos)
      if (const auto b = token_name(cfg, "bos_token", file)) bos = id_of(tok, *b, "bos_token", file);
    if (eos.empty())
      if (const auto e = token_name(cfg, "eos_token", file)) eos.push_back(id_of(tok, *e, "eos_token", file));
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) tok.set_adds_bos(cfg["add_bos_token"].get<bool>());
  }
  for (const char* name : {"generation_config.json", "config.json"}) {
    const fs::path file = dir / name;
    if (!is_file(file)) continue;
    const json cfg = detail::read_json_file(file);
    if (!cfg.is_object()) throw TokenizerError(file.string() + ": expected a JSON object");
    if (!bos) {
      const auto b = token_ids(cfg, "bos_token_id", file, tok);
      if (!b.empty()) bos = b.front();
    }
    add_unique(eos, token_ids(cfg, "eos_token_id", file, tok));
  }
  if (bos) tok.set_bos(bos);
  if (!eos.empty()) {
    add_unique(eos, tok.eos_ids());
    tok.set_eos(std::move(eos));
  }
}

// mpcache.json's "tokenizer": "none": a model over bytes (token id = byte
// value) says so in its own folder. Anything else there is refused by name.
bool says_bytes(const fs::path& dir) {
  const fs::path file = dir / "mpcache.json";
  if (!is_file(file)) return false;
  const json cfg = detail::read_json_file(file);
  if (!cfg.is_object()) throw TokenizerError(file.string() + ": expected a JSON object");
  for (const auto& [key, value] : cfg.items())
    if (key != "tokenizer")
      throw TokenizerError(file.string() + ": unknown key \"" + key + "\" (known: \"tokenizer\")");
  if (!cfg.contains("tokenizer")) return false;
  if (cfg["tokenizer"] != "none")
    throw TokenizerError(file.string() + ": \"tokenizer\": " + cfg["tokenizer"].dump() +
                         " is not \"none\" (the byte tokenizer; other tokenizers are read from their own files)");
  for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model"})
    if (is_file(dir / name))
      throw TokenizerError(file.string() + ": says \"tokenizer\": \"none\", but the folder has " + name +
                           " too: which one is the model's?");
  return true;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw TokenizerError(model_dir.string() + ": not a directory (expected a model folder with a tokenizer)");
  if (says_bytes(model_dir)) return make_byte_tokenizer();
  std::unique_ptr<Tokenizer> tok;
  const bool has_vocab = is_file(model_dir / "vocab.json");
  const bool has_merges = is_file(model_dir / "merges.txt");
  if (is_file(model_dir / "tokenizer.json")) {
    tok = load_tokenizer_json(model_dir / "tokenizer.json");
  } else if (has_vocab && has_merges) {
    tok = load_gpt2_vocab_merges(model_dir / "vocab.json", model_dir / "merges.txt");
  } else if (has_vocab != has_merges) {
    throw TokenizerError(model_dir.string() + ": has " + (has_vocab ? "vocab.json but no merges.txt" : "merges.txt but no vocab.json") +
                         " (a GPT-2 tokenizer needs both)");
  } else if (is_file(model_dir / "tokenizer.model")) {
    tok = load_sentencepiece(model_dir / "tokenizer.model");
  } else {
    throw TokenizerError(model_dir.string() +
                         ": no tokenizer found; looked for tokenizer.json, vocab.json + merges.txt, tokenizer.model, "
                         "and mpcache.json's \"tokenizer\": \"none\" (a model over bytes)");
  }
  apply_model_config(model_dir, *tok);
  return tok;
}

}  // namespace mpcache::text
