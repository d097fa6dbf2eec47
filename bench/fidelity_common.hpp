// What the fidelity presets share: the held-out text, policy names and the
// MPCache ablation suffixes. Include after `import mpcache;`.
#pragma once

namespace CLI {
class App;
}

namespace mpcache::bench {

// The held-out novel where tools/train/extract_austen.py puts it by default:
// $XDG_CACHE_HOME/mpcache/austen/persuasion.txt (~/.cache when unset).
std::string default_text_path();

// The whole file; a missing file says how to extract it.
std::string read_text(const std::string& path);

// What the presets that decode held-out prompts (private-fidelity,
// truncation-audit) are asked: model, text, policies, budget, prompts.
struct HeldOutRun {
  std::string model_dir;
  std::string text_path;
  std::vector<std::string> policies;
  std::size_t budget = 48;  // tokens per KV head per layer
  std::size_t prompts = 20;
  std::size_t prompt_bytes = 512;
  std::size_t tokens = 32;
};

// Their options: those of add_model_and_text_options, --policies, --budget,
// --prompts, --prompt-bytes and --tokens (at least min_tokens).
void add_held_out_run_options(CLI::App& app, std::string& preset, HeldOutRun& run, std::size_t min_tokens,
                              const std::string& tokens_help);

// `count` prompts of `bytes` bytes, evenly spaced over the text at `path`
// (fixed, and far apart), after checking that the text is long enough and
// that a prompt plus `tokens` decoded tokens fit the model's positions.
struct HeldOutPrompt {
  std::size_t offset = 0;  // in the text
  std::vector<std::uint32_t> tokens;
};
std::vector<HeldOutPrompt> held_out_prompts(const std::string& path, const ModelConfig& c, std::size_t count,
                                            std::size_t bytes, std::size_t tokens);

// The options every fidelity preset has: --preset (required), --model (our
// Austen model by default) and --text (the extracted held-out novel).
void add_model_and_text_options(CLI::App& app, std::string& preset, std::string& model_dir,
                                std::string& text_path, const std::string& text_help);

// "mpcache" (our defaults, kv::MpCacheOptions{}), or "mpcache-paper" (the
// paper's options) and the paper's options with ablation suffixes, each
// switching one part off or over:
// -bound (sign-split bound similarity), -noshare (no layer index sharing),
// -noevict (no static eviction), -flat (no coarse level), -rmax (alpha 1),
// -hier (the coarse level at every size, as the paper), -ahead (ranking
// ahead), -coarseP (keep P% of the coarse clusters); layer sharing:
// -shareLofO (layer L takes layer O's pick; several allowed, replacing the
// odd-layer rule), -widenP (the owner ranks P% of k, the sharing layer
// attends them all), -rerank (the sharing layer ranks its own query among
// the owner's).
// nullopt if `name` is not an MPCache name, or is a named MPCache policy
// other than mpcache-paper (kv::make_policy builds those); an unknown
// suffix is an error.
std::optional<kv::MpCacheOptions> mpcache_variant(const std::string& name);

// Throws for a name make_policy would not know, without building anything.
void check_policy_name(const std::string& name);

// A policy by name with `budget` tokens per KV head; nullopt (with a line on
// stderr) when the policy cannot work with that budget.
template <Protocol Q>
std::optional<kv::AnyPolicy<Q>> make_policy(const std::string& name, std::size_t budget) {
  check_policy_name(name);
  const auto mpcache_options = mpcache_variant(name);
  try {
    if (!mpcache_options) return kv::make_policy<Q>(name, budget);
    return kv::AnyPolicy<Q>(kv::MpCache<Q>(budget, *mpcache_options));
  } catch (const Error& e) {
    std::fprintf(stderr, "fidelity: skipping %s at %zu tokens: %s\n", name.c_str(), budget, e.what());
    return std::nullopt;
  }
}

// Every name known and buildable with `budget`: checked before any file is read.
template <Protocol Q>
void check_policies(const std::vector<std::string>& names, std::size_t budget) {
  for (const auto& name : names)
    if (!make_policy<Q>(name, budget))
      throw Error(ErrorCode::invalid_argument, "policy " + name + " cannot run with budget " + std::to_string(budget));
}

}  // namespace mpcache::bench
