// The paper presets' runs: the model shapes, the arms of each figure, and
// the plan of runs a command line asks for (bench/paper_presets.cpp measures
// them). Include after the imports, as the bench's other headers.
#pragma once

namespace mpcache::bench::paper {

// LLaMA-2 proportions at hidden size 1024: head_dim 128 (8 heads, no GQA),
// MLP width 2752 (LLaMA-2-7B's 11008 / 4096), 32 layers, vocab 32000.
inline ModelConfig llama_1024() {
  return {.architecture = Architecture::llama, .vocab_size = 32000, .hidden_size = 1024,
          .intermediate_size = 2752, .num_layers = 32, .num_heads = 8, .num_kv_heads = 8,
          .head_dim = 128, .max_positions = 4096};
}

// GPT-2 124M: 12 layers, hidden 768, 12 heads, MLP 3072, vocab 50257.
inline ModelConfig gpt2_124m() {
  return {.architecture = Architecture::gpt2, .vocab_size = 50257, .hidden_size = 768,
          .intermediate_size = 3072, .num_layers = 12, .num_heads = 12, .num_kv_heads = 12,
          .head_dim = 64, .max_positions = 1024, .tie_word_embeddings = true};
}

// One policy arm of a preset.
struct Arm {
  std::string label;   // in rows and plots
  std::string policy;  // full | longcache | mpcache (the paper's options) | any kv::policy_names()
  double budget = 0;   // fraction of the sequence length (0: none)
  kv::MpCacheOptions options = kv::MpCacheOptions::paper();
};

struct Run {
  ProtocolMode mode;  // backend, truncation, comparisons, offline budgets
  std::string preset, model;
  ModelConfig config;
  std::size_t length = 0;
  Arm arm;
  bool real_prefill = false;
  bool decode = true;  // false: the prefill is the row (Table 8 without a cache)
  std::size_t steps = 3;
  std::size_t evict_up_to = 0;  // prepared caches: MPCache runs static eviction up to this length
  std::size_t threads = 1;      // each party's ComputePool (one pool: the parties share this thread)
  std::size_t memory_budget = default_prefill_memory_budget;  // a real prefill's working set per party
  bool compact_weights = false;  // rss3: 8 bytes per weight and party (Rss3Options::compact_weights)
  bool add2() const { return mode.backend == ProtocolBackend::add2; }
  bool store() const { return mode.comparison_store(); }
  bool pairs() const { return mode.truncation_pairs(); }
};

inline std::size_t budget_tokens_of(const Run& r) {
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(r.arm.budget * double(r.length))));
}

struct Settings {
  std::string preset;
  // Probabilistic truncation (the paper's) unless asked otherwise;
  // paper-fig13 always runs add2.
  jobs::ProtocolModeFlags mode;
  std::string out_dir;
  std::vector<std::size_t> lengths;
  std::size_t layers = 0;  // 0: the model's
  std::size_t vocab = 0;   // 0: the model's (smaller only for smoke runs)
  std::size_t steps = 3;
  std::size_t evict_up_to = 1024;
  std::vector<std::string> policies;  // empty: every arm
  std::size_t threads = 1;
  std::string memory_budget;  // empty: default_prefill_memory_budget
  bool compact_weights = false;
  bool real_prefill = false;  // long-context: prefill random tokens for real instead of a prepared cache
  std::optional<std::size_t> flat_up_to;  // long-context: MpCacheOptions::flat_up_to of its MPCache arms
  std::optional<bool> rank_ahead;         // long-context: MpCacheOptions::rank_ahead of its MPCache arms
  std::optional<double> coarse_ratio;     // long-context: MpCacheOptions::coarse_ratio
  bool json_stdout = false;
};

inline kv::MpCacheOptions paper_defaults() { return kv::MpCacheOptions::paper(); }

// The paper's Figure 11, one optimisation added per arm.
inline std::vector<Arm> ablation_arms(double budget) {
  kv::MpCacheOptions tokenwise = paper_defaults();
  tokenwise.keep_ratio = 1.0;
  tokenwise.cluster = 1;
  tokenwise.hierarchical = false;
  tokenwise.share_layers = false;
  tokenwise.similarity = kv::Similarity::linear;  // one key per "cluster": q . k exactly
  kv::MpCacheOptions evicted = tokenwise;
  evicted.keep_ratio = 0.25;  // the paper's 75% static eviction
  kv::MpCacheOptions clustered = evicted;
  clustered.cluster = 16;
  clustered.hierarchical = true;
  clustered.flat_up_to = 0;
  clustered.similarity = kv::Similarity::elementwise;
  kv::MpCacheOptions linearised = clustered;
  linearised.similarity = kv::Similarity::linear;
  kv::MpCacheOptions shared = linearised;
  shared.share_layers = true;
  return {{"1 token-wise", "mpcache", budget, tokenwise},
          {"2 +static eviction", "mpcache", budget, evicted},
          {"3 +clustering", "mpcache", budget, clustered},
          {"4 +linearised similarity", "mpcache", budget, linearised},
          {"5 +layer sharing", "mpcache", budget, shared}};
}

inline std::vector<Run> plan(const Settings& s) {
  std::vector<Run> runs;
  auto shaped = [&](ModelConfig c) {
    if (s.layers) c.num_layers = s.layers;
    if (s.vocab) c.vocab_size = s.vocab;
    return c;
  };
  auto lengths_or = [&](std::vector<std::size_t> d) { return s.lengths.empty() ? d : s.lengths; };
  const ProtocolMode proto{.backend = parse_protocol_backend(s.mode.protocol)};
  if (s.preset == "paper-fig10" || s.preset == "paper-fig13") {
    const auto c = shaped(llama_1024());
    const ProtocolMode protocol = s.preset == "paper-fig13" ? ProtocolMode{.backend = ProtocolBackend::add2} : proto;
    for (std::size_t t : lengths_or({512, 1024, 2048}))
      for (const Arm& a : std::vector<Arm>{{"full cache", "full"},
                                          {"LongCache 10%", "longcache", 0.10},
                                          {"MPCache 10%", "mpcache", 0.10, paper_defaults()},
                                          {"MPCache 20%", "mpcache", 0.20, paper_defaults()}})
        runs.push_back({protocol, s.preset, "llama2-h1024", c, t, a, false, true, s.steps, s.evict_up_to});
  } else if (s.preset == "long-context") {
    // Fig. 10's shapes with our MPCache defaults (the option set that keeps
    // passkey retrieval: kv::MpCacheOptions{}), exact truncation unless
    // asked otherwise, up to 4,096 tokens.
    auto c = shaped(llama_1024());
    c.max_positions = 8192;  // (LLaMA-2 has 4,096; a 4,096-token cache then decodes past it)
    kv::MpCacheOptions ours;
    if (s.flat_up_to) ours.flat_up_to = *s.flat_up_to;
    if (s.rank_ahead) ours.rank_ahead = *s.rank_ahead;
    if (s.coarse_ratio) ours.coarse_ratio = *s.coarse_ratio;
    for (std::size_t t : lengths_or({1024, 2048, 4096}))
      for (const Arm& a : std::vector<Arm>{{"full cache", "full"},
                                          {"MPCache 10%", "mpcache", 0.10, ours},
                                          {"MPCache 20%", "mpcache", 0.20, ours}})
        runs.push_back({proto, s.preset, "llama2-h1024", c, t, a, s.real_prefill, true, s.steps, s.evict_up_to});
  } else if (s.preset == "paper-fig11") {
    const auto c = shaped(llama_1024());
    for (std::size_t t : lengths_or({512, 1024, 2048}))
      for (const Arm& a : ablation_arms(0.10))
        runs.push_back({proto, s.preset, "llama2-h1024", c, t, a, false, true, s.steps, s.evict_up_to});
  } else if (s.preset == "paper-table8") {
    const auto c = shaped(gpt2_124m());
    for (std::size_t t : lengths_or({6, 16})) {
      runs.push_back({proto, s.preset, "gpt2-124m", c, t, {"with KV cache", "full"}, true, true, s.steps});
      runs.push_back({proto, s.preset, "gpt2-124m", c, t, {"without KV cache", "full"}, true, false, 0});
    }
  } else if (s.preset == "gpt2-512") {
    const auto c = shaped(gpt2_124m());
    for (std::size_t t : lengths_or({512}))
      for (const Arm& a : std::vector<Arm>{{"full cache", "full"}, {"MPCache 10%", "mpcache", 0.10, paper_defaults()}})
        runs.push_back({proto, s.preset, "gpt2-124m", c, t, a, true, true, s.steps});
  }
  if (!s.policies.empty()) {
    // A named policy the preset has no arm of runs at the preset's smallest
    // budget (the full cache's arms have none: 10%), after the preset's arms
    // of each length.
    std::vector<Run> extra;
    for (const auto& name : s.policies) {
      if (std::any_of(runs.begin(), runs.end(), [&](const Run& r) { return r.arm.policy == name; })) continue;
      double budget = 0;
      for (const Run& r : runs)
        if (r.arm.budget > 0) budget = budget == 0 ? r.arm.budget : std::min(budget, r.arm.budget);
      for (const Run& r : runs) {
        if (r.arm.policy != runs.front().arm.policy || r.arm.label != runs.front().arm.label) continue;
        Run x = r;
        x.arm = {name + " " + std::to_string(int(std::lround((budget > 0 ? budget : 0.10) * 100))) + "%", name,
                 budget > 0 ? budget : 0.10};
        extra.push_back(std::move(x));
      }
    }
    std::erase_if(runs, [&](const Run& r) {
      return std::find(s.policies.begin(), s.policies.end(), r.arm.policy) == s.policies.end();
    });
    runs.insert(runs.end(), extra.begin(), extra.end());
  }
  for (Run& r : runs) {
    r.threads = s.threads;
    r.compact_weights = s.compact_weights;
    r.memory_budget = s.memory_budget.empty() ? default_prefill_memory_budget : parse_memory_size(s.memory_budget);
  }
  // Each run once per way of comparing, side by side, on its preset's backend.
  std::vector<Run> out;
  for (const Run& r : runs)
    for (ProtocolMode mode : s.mode.modes()) {
      mode.backend = r.mode.backend;
      mode.check();
      Run x = r;
      x.mode = mode;
      out.push_back(std::move(x));
    }
  return out;
}

// long-context's MPCache options (each defaults to MpCacheOptions{}'s).
inline void add_long_context_mpcache_options(CLI::App& app, Settings& s) {
  app.add_option("--flat-up-to", s.flat_up_to,
                 "long-context: MPCache's flat top-k up to this many candidate clusters, the coarse level above "
                 "(default: MpCacheOptions{}'s)");
  app.add_option("--rank-ahead", s.rank_ahead,
                 "long-context: whether MPCache ranks the next step's clusters with this step's query (true or "
                 "false; default: MpCacheOptions{}'s)");
  app.add_option("--coarse-ratio", s.coarse_ratio,
                 "long-context: share of coarse clusters MPCache's hierarchical top-k keeps (default: "
                 "MpCacheOptions{}'s)")
      ->check(CLI::Range(0.01, 1.0));
}

}  // namespace mpcache::bench::paper
