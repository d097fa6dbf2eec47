#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <set>
#include <sstream>
#include <CLI/CLI.hpp>
import mpcache;
#include "fidelity_common.hpp"

namespace mpcache::bench {

std::string default_text_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string cache = xdg && *xdg ? std::string(xdg) : std::string(home ? home : ".") + "/.cache";
  return cache + "/mpcache/austen/persuasion.txt";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const auto dir = std::filesystem::path(path).parent_path().string();
    throw Error(ErrorCode::io, path + ": cannot open the evaluation text. Extract it first with\n  /usr/bin/python3 " +
                                   std::string(MPCACHE_SOURCE_DIR) + "/tools/train/extract_austen.py --out " + dir +
                                   "\nor pass --text FILE");
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<HeldOutPrompt> held_out_prompts(const std::string& path, const ModelConfig& c, std::size_t count,
                                            std::size_t bytes, std::size_t tokens) {
  if (bytes + tokens > c.max_positions)
    throw Error(ErrorCode::invalid_argument, "--prompt-bytes + --tokens exceed the model's " +
                                                 std::to_string(c.max_positions) + " positions");
  const std::string text = read_text(path);
  if (text.size() < bytes) throw Error(ErrorCode::invalid_argument, path + " is shorter than --prompt-bytes");
  std::vector<HeldOutPrompt> prompts(count);
  for (std::size_t i = 0; i < count; ++i) {
    prompts[i].offset = (text.size() - bytes) * i / count;
    for (std::size_t b = 0; b < bytes; ++b)
      prompts[i].tokens.push_back(static_cast<unsigned char>(text[prompts[i].offset + b]));
  }
  return prompts;
}

void add_model_and_text_options(CLI::App& app, std::string& preset, std::string& model_dir,
                                std::string& text_path, const std::string& text_help) {
  model_dir = std::string(MPCACHE_SOURCE_DIR) + "/tools/model/austen-byte";
  text_path = default_text_path();
  app.add_option("--preset", preset)->required();
  app.add_option("--model", model_dir, "model directory (config.json + model.safetensors)");
  app.add_option("--text", text_path, text_help);
}

void add_held_out_run_options(CLI::App& app, std::string& preset, HeldOutRun& run, std::size_t min_tokens,
                              const std::string& tokens_help) {
  add_model_and_text_options(app, preset, run.model_dir, run.text_path, "held-out text (bytes) the prompts are cut from");
  app.add_option("--policies", run.policies, "policies (full, mpcache and its -suffix variants)")->delimiter(',');
  app.add_option("--budget", run.budget, "tokens per KV head per layer")->check(CLI::Range(1, 1 << 20));
  app.add_option("--prompts", run.prompts, "prompts")->check(CLI::Range(1, 10000));
  app.add_option("--prompt-bytes", run.prompt_bytes, "bytes per prompt")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tokens", run.tokens, tokens_help)->check(CLI::Range(min_tokens, std::size_t{1} << 20));
}

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 3 && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// "coarse25" -> 25 for prefix "coarse": 1-3 digits.
std::optional<int> percent_suffix(const std::string& part, const std::string& prefix) {
  if (!part.starts_with(prefix) || !all_digits(std::string_view(part).substr(prefix.size()))) return std::nullopt;
  return std::stoi(part.substr(prefix.size()));
}

// "share3of1": layer 3 takes layer 1's pick.
std::optional<std::pair<std::size_t, std::size_t>> share_pair(const std::string& part) {
  if (!part.starts_with("share")) return std::nullopt;
  const auto of = part.find("of", 5);
  if (of == std::string::npos) return std::nullopt;
  const std::string layer = part.substr(5, of - 5), owner = part.substr(of + 2);
  if (!all_digits(layer) || !all_digits(owner)) return std::nullopt;
  return std::pair<std::size_t, std::size_t>{std::stoul(layer), std::stoul(owner)};
}

}  // namespace

std::optional<kv::MpCacheOptions> mpcache_variant(const std::string& name) {
  if (name != "mpcache" && !name.starts_with("mpcache-")) return std::nullopt;
  if (name == "mpcache") return kv::MpCacheOptions{};  // our defaults
  const auto& named = kv::policy_names();
  if (name != "mpcache-paper" && std::find(named.begin(), named.end(), name) != named.end())
    return std::nullopt;  // a named MPCache policy (mpcache-shared-step, ...): kv::make_policy builds it
  kv::MpCacheOptions o = kv::MpCacheOptions::paper();
  std::stringstream parts(name.substr(7));
  std::string part;
  while (std::getline(parts, part, '-')) {
    if (part.empty()) continue;
    if (part == "paper") continue;  // the base every suffix starts from
    if (part == "bound") o.similarity = kv::Similarity::bound;
    else if (part == "noshare") o.share_layers = false;
    else if (part == "noevict") o.keep_ratio = 1.0;
    else if (part == "flat") o.hierarchical = false;
    else if (part == "rmax") o.alpha = 1.0;
    else if (part == "hier") o.flat_up_to = 0;
    else if (part == "ahead") o.rank_ahead = true;
    else if (part == "rerank") o.share_rerank = true;
    else if (auto pair = share_pair(part)) o.share_pairs.push_back(*pair);
    else if (auto widen = percent_suffix(part, "widen"); widen && *widen >= 100) o.share_widen = *widen / 100.0;
    else if (auto coarse = percent_suffix(part, "coarse"); coarse && *coarse > 0)
      o.coarse_ratio = *coarse / 100.0;  // coarseP: keep P% of the coarse clusters
    else throw Error(ErrorCode::invalid_argument, "fidelity: unknown MPCache variant '" + part + "' in '" + name +
                                                      "' (paper, bound, noshare, noevict, flat, rmax, hier, ahead, coarseP, "
                                                      "shareLofO, widenP, rerank)");
  }
  return o;
}

void check_policy_name(const std::string& name) {
  const auto& known = kv::policy_names();
  if (mpcache_variant(name) || std::find(known.begin(), known.end(), name) != known.end()) return;
  throw Error(ErrorCode::invalid_argument, "fidelity: unknown policy '" + name + "'");
}

}  // namespace mpcache::bench
