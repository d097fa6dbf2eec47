// Checkpoints as Hugging Face publishes them: sharded safetensors, tied and
// untied heads, LLaMA-family configs (GQA, head_dim, rope_theta,
// rope_scaling linear and llama3), Qwen2's q/k/v biases, GPT-2 without the
// "transformer." prefix. The fixtures in tests/fixtures/model/ and their
// expected logits come from tools/model/make_checkpoints.py (an independent
// NumPy forward pass); each must give those logits on the float64 backend
// and, generated privately over rss3 (three parties in this process), the
// float64 backend's greedy tokens.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <nlohmann/json.hpp>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/real_tensors.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
namespace fs = std::filesystem;
using testing::run;

namespace {
const fs::path fixtures = fs::path(MPCACHE_SOURCE_DIR) / "tests/fixtures/model";

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no mpcache::Error");
  return {};
}

// A scratch copy of a fixture folder, removed at the end of the test.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& fixture) {
    static int count = 0;
    dir = fs::temp_directory_path() /
          ("mpcache-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
    fs::remove_all(dir);
    fs::copy(fixtures / fixture, dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(dir / file) << text; }
};

ModelConfig config_of(const std::string& fixture) { return ModelConfig::from_json_file(fixtures / fixture / "config.json"); }

// transformers' RoPE frequencies, written again here in float64 from the
// definitions (modeling_rope_utils: default, linear, llama3).
std::vector<double> hf_inv_freq(double theta, std::size_t d, const nlohmann::json& scaling) {
  std::vector<double> inv;
  for (std::size_t i = 0; i < d; i += 2) inv.push_back(1.0 / std::pow(theta, double(i) / double(d)));
  if (scaling.is_null()) return inv;
  const std::string type = scaling.contains("rope_type") ? scaling["rope_type"] : scaling["type"];
  const double factor = scaling["factor"];
  for (double& f : inv) {
    if (type == "linear") {
      f = f / factor;
    } else {
      const double low = scaling["low_freq_factor"], high = scaling["high_freq_factor"];
      const double old = scaling["original_max_position_embeddings"].get<double>();
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen < old / high) continue;                  // high frequencies: kept
      if (wavelen > old / low) { f = f / factor; continue; }  // low frequencies: divided
      const double smooth = (old / wavelen - low) / (high - low);
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
  return inv;
}

double max_relative_gap(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

struct Expected {
  std::vector<std::uint32_t> prompt, tokens;
  std::vector<std::vector<double>> logits;
};

Expected expected_of(const std::string& fixture) {
  const auto j = read_json(fixtures / fixture / "expected.json");
  return {j["prompt_ids"].get<std::vector<std::uint32_t>>(), j["tokens"].get<std::vector<std::uint32_t>>(),
          j["logits"].get<std::vector<std::vector<double>>>()};
}

// The float64 backend on the fixture: largest |logit - NumPy's| over the
// prompt (prefill of all but the last token, then a decode step for it),
// and the greedy continuation.
struct RefRun {
  double worst = 0;
  std::vector<std::uint32_t> tokens;
};

RefRun ref_run(const std::string& fixture, const Expected& e) {
  const ModelConfig c = config_of(fixture);
  Ref p;
  auto weights = run(load_decoder(p, c, weights_from_file(fixtures / fixture / "model.safetensors")));
  Decoder<Ref> decoder(weights);
  kv::FullCache<Ref> full;
  RefRun out;
  const std::vector<std::uint32_t> head(e.prompt.begin(), e.prompt.end() - 1);
  const auto pre = p.to_real(run(decoder.prefill(p, full, 0, head, head.size())));
  auto last = p.to_real(run(decoder.decode(p, full, 0, e.prompt.back())));
  REQUIRE(e.logits.size() == e.prompt.size());
  for (std::size_t t = 0; t < e.prompt.size(); ++t)
    for (std::size_t v = 0; v < c.vocab_size; ++v)
      out.worst = std::max(out.worst, std::abs((t + 1 < e.prompt.size() ? pre(t, v) : last(0, v)) - e.logits[t][v]));
  for (std::size_t k = 0; k < e.tokens.size(); ++k) {
    std::uint32_t next = 0;
    for (std::uint32_t v = 1; v < c.vocab_size; ++v)
      if (last(0, v) > last(0, next)) next = v;
    out.tokens.push_back(next);
    if (k + 1 < e.tokens.size()) last = p.to_real(run(decoder.decode(p, full, 0, next)));
  }
  return out;
}

// Private generation over rss3 (client 0, model owner 1): every party's result.
std::vector<GenerationResult> private_run(const fs::path& dir, const std::vector<std::uint32_t>& prompt,
                                          std::size_t count, bool compact_weights) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
    GenerationJob job;
    job.model_dir = dir;
    job.policy = "full";
    job.new_tokens = count;
    job.rss3 = {.exact_truncation = true, .insecure_seed = 5, .compact_weights = compact_weights};
    if (id == 0) job.prompt = prompt;
    co_return co_await generate_party(network.endpoint(id), std::move(job));
  });
  CHECK(results[1].tokens.empty());
  CHECK(results[2].tokens.empty());
  return results;
}

// The client's tokens.
std::vector<std::uint32_t> private_tokens(const fs::path& dir, const std::vector<std::uint32_t>& prompt,
                                          std::size_t count) {
  return private_run(dir, prompt, count, false)[0].tokens;
}

// A source over `inner` that also holds lm_head.weight = embedding + delta.
WeightSource with_lm_head(WeightSource inner, const std::string& embedding, double delta) {
  return WeightSource(
      [inner, embedding, delta](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
        if (name != "lm_head.weight") return inner(name, shape);
        auto e = inner(embedding, shape);
        e->data()[0] += delta;
        return e;
      },
      {}, [inner](const std::string& name) { return name == "lm_head.weight" || inner.holds(name) == true; });
}

const std::string llama_base = R"("vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64)";
std::string llama_with(const std::string& type, const std::string& extra) {
  return "{\"model_type\": \"" + type + "\", " + llama_base + (extra.empty() ? "" : ", " + extra) + "}";
}
std::string config_error(const std::string& text) {
  return error_of([&] { ModelConfig::from_json_text(text, "cfg"); });
}
}  // namespace

TEST_SUITE("checkpoints") {
  TEST_CASE("RoPE frequencies match transformers' definitions: committed vectors and the formula here") {
    const auto cases = read_json(fixtures / "rope_vectors.json")["cases"];
    REQUIRE(cases.size() == 4);
    for (const auto& k : cases) {
      nlohmann::json cfg = {{"model_type", "llama"}, {"vocab_size", 8}, {"hidden_size", 16},
                            {"intermediate_size", 8}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
                            {"max_position_embeddings", 16}, {"head_dim", k["head_dim"]},
                            {"rope_theta", k["rope_theta"]}, {"rope_scaling", k["rope_scaling"]}};
      const auto c = ModelConfig::from_json_text(cfg.dump(), k["name"]);
      const auto ours = c.rope_inv_freq();
      CAPTURE(k["name"].get<std::string>());
      CHECK(max_relative_gap(ours, k["inv_freq"].get<std::vector<double>>()) < 1e-14);
      CHECK(max_relative_gap(ours, hf_inv_freq(k["rope_theta"], k["head_dim"], k["rope_scaling"])) < 1e-14);
    }
    // Llama 3.1's scaling keeps the highest frequency, divides the lowest by 8.
    const auto& l31 = cases[0];
    nlohmann::json cfg = {{"vocab_size", 8}, {"hidden_size", 16}, {"intermediate_size", 8}, {"num_hidden_layers", 1},
                          {"num_attention_heads", 2}, {"max_position_embeddings", 16}, {"head_dim", 128},
                          {"rope_theta", 500000.0}, {"rope_scaling", l31["rope_scaling"]}};
    const auto inv = ModelConfig::from_json_text(cfg.dump(), "l31").rope_inv_freq();
    CHECK(inv.front() == 1.0);
    CHECK(inv.back() == doctest::Approx(std::pow(500000.0, -126.0 / 128.0) / 8).epsilon(1e-14));
    // The fixture's three frequencies fall in the three bands (kept, blended, divided).
    const auto fixture_inv = config_of("llama3-gqa-sharded").rope_inv_freq();
    CHECK(fixture_inv[0] == 1.0);
    CHECK(fixture_inv[1] < 0.1);
    CHECK(fixture_inv[1] > 0.1 / 8);
    CHECK(fixture_inv[2] == doctest::Approx(0.01 / 8).epsilon(1e-14));
  }

  TEST_CASE("LLaMA-family configs: what is read, and what is refused by name") {
    const auto l3 = config_of("llama3-gqa-sharded");
    CHECK(l3.num_heads == 4);
    CHECK(l3.num_kv_heads == 2);
    CHECK(l3.head_dim == 6);
    CHECK(l3.rope_theta == 1000.0);
    CHECK(l3.rope_scaling == RopeScaling::llama3);
    CHECK(l3.rope_factor == 8.0);
    CHECK(l3.rope_original_max_positions == 128);
    CHECK_FALSE(l3.tie_word_embeddings);
    const auto qwen = config_of("qwen2-bias");
    CHECK(qwen.architecture == Architecture::llama);
    CHECK(qwen.qkv_bias);
    CHECK_FALSE(qwen.o_bias);
    CHECK(qwen.rope_scaling == RopeScaling::linear);
    CHECK(qwen.rope_factor == 2.0);
    CHECK(qwen.tie_word_embeddings);
    CHECK(qwen.summary().find("(qwen2)") != std::string::npos);
    const auto biased = ModelConfig::from_json_text(llama_with("llama", R"("attention_bias": true)"), "b");
    CHECK(biased.qkv_bias);
    CHECK(biased.o_bias);
    CHECK(ModelConfig::from_json_text(llama_with("mistral", R"("sliding_window": null)"), "m").model_type == "mistral");
    CHECK(ModelConfig::from_json_text(llama_with("mistral", R"("sliding_window": 64)"), "m").num_layers == 1);
    // Shapes and rope settings are in the digest that parties compare.
    CHECK(ModelConfig::from_json_text(llama_with("llama", R"("rope_scaling": {"type": "linear", "factor": 2})"), "a")
              .digest() != ModelConfig::from_json_text(llama_with("llama", ""), "b").digest());
    CHECK(biased.digest() != ModelConfig::from_json_text(llama_with("llama", ""), "b").digest());

    CHECK(config_error(llama_with("llama", R"("rope_scaling": {"rope_type": "yarn", "factor": 4})"))
              .find("rope type 'yarn' is not supported") != std::string::npos);
    CHECK(config_error(llama_with("llama", R"("rope_scaling": {"type": "dynamic", "factor": 4})"))
              .find("'dynamic'") != std::string::npos);
    CHECK(config_error(llama_with("llama", R"("rope_scaling": {"rope_type": "linear", "factor": 2, "mscale": 1})"))
              .find("key 'mscale' is not known for rope type 'linear'") != std::string::npos);
    CHECK(config_error(llama_with("llama", R"("rope_scaling": {"rope_type": "llama3", "factor": 8})"))
              .find("missing 'low_freq_factor'") != std::string::npos);
    CHECK(config_error(llama_with("llama", R"("quantization_config": {"bits": 4})"))
              .find("key 'quantization_config' is not known") != std::string::npos);
    CHECK(config_error(llama_with("llama", R"("sliding_window": 16)")).find("key 'sliding_window'") !=
          std::string::npos);  // LLaMA has none
    CHECK(config_error(llama_with("llama", R"("hidden_act": "gelu")")).find("'hidden_act' is 'gelu'") !=
          std::string::npos);
    CHECK(config_error(llama_with("llama", R"("mlp_bias": true)")).find("'mlp_bias'") != std::string::npos);
    CHECK(config_error(llama_with("llama", R"("partial_rotary_factor": 0.5)")).find("'partial_rotary_factor'") !=
          std::string::npos);
    CHECK(config_error(llama_with("llama", R"("head_dim": 5)")).find("head_dim 5 is odd") != std::string::npos);
    CHECK(config_error(llama_with("mistral", R"("sliding_window": 16)")).find("'sliding_window' 16 is shorter") !=
          std::string::npos);
    CHECK(config_error(llama_with("qwen2", R"("use_sliding_window": true, "sliding_window": 16)"))
              .find("'sliding_window' 16 is shorter than max_position_embeddings 64") != std::string::npos);
    CHECK(ModelConfig::from_json_text(llama_with("qwen2", R"("use_sliding_window": true, "sliding_window": 64)"), "q")
              .qkv_bias);
    CHECK(ModelConfig::from_json_text(llama_with("qwen2", R"("use_sliding_window": false, "sliding_window": 16)"), "q")
              .qkv_bias);
    CHECK(config_error(llama_with("qwen2", R"("use_mrope": true)")).find("'use_mrope'") != std::string::npos);
    CHECK(config_error(llama_with("phi3", "")).find("model_type 'phi3' is not supported") != std::string::npos);
    // Known-harmless keys pass (TinyLlama's and SmolLM2's extras among them).
    CHECK_NOTHROW(ModelConfig::from_json_text(
        llama_with("llama", R"("architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "pretraining_tp": 1,
                    "transformers_version": "4.35.0", "use_cache": true, "bos_token_id": 1, "eos_token_id": [2, 3],
                    "pad_token_id": null, "initializer_range": 0.02, "attention_dropout": 0.0,
                    "is_llama_config": true, "rope_interleaved": false, "rope_scaling": null)"),
        "harmless"));
  }

  TEST_CASE("GPT-2 configs: the published one loads; other activations and attention scalings are refused") {
    const std::string published = read_text(fixtures / "gpt2-bare/config.json");
    CHECK(ModelConfig::from_json_text(published, "gpt2").architecture == Architecture::gpt2);
    auto gpt2_with = [](const std::string& extra) {
      return std::string(R"({"model_type": "gpt2", "vocab_size": 8, "n_embd": 8, "n_layer": 1, "n_head": 2,
                             "n_positions": 8, )") + extra + "}";
    };
    CHECK(config_error(gpt2_with(R"("activation_function": "relu")")).find("'activation_function' is 'relu'") !=
          std::string::npos);
    CHECK(config_error(gpt2_with(R"("scale_attn_by_inverse_layer_idx": true)"))
              .find("'scale_attn_by_inverse_layer_idx'") != std::string::npos);
    CHECK(config_error(gpt2_with(R"("rms_norm_eps": 1e-6)")).find("key 'rms_norm_eps'") != std::string::npos);
    CHECK_FALSE(ModelConfig::from_json_text(gpt2_with(R"("tie_word_embeddings": false)"), "g").tie_word_embeddings);
  }

  TEST_CASE("each fixture's float64 forward matches NumPy's, and its greedy tokens are the committed ones") {
    for (const std::string fixture : {"llama3-gqa-sharded", "qwen2-bias", "gpt2-bare"}) {
      CAPTURE(fixture);
      const Expected e = expected_of(fixture);
      const RefRun r = ref_run(fixture, e);
      MESSAGE(fixture << ": float64 vs NumPy, max |logit error| = " << r.worst);
      CHECK(r.worst < 1e-9);
      CHECK(r.tokens == e.tokens);
    }
  }

  TEST_CASE("private generation over rss3 gives the float64 greedy tokens on each fixture") {
    for (const std::string fixture : {"llama3-gqa-sharded", "qwen2-bias", "gpt2-bare"}) {
      CAPTURE(fixture);
      const Expected e = expected_of(fixture);
      CHECK(private_tokens(fixtures / fixture, e.prompt, e.tokens.size()) == ref_run(fixture, e).tokens);
    }
  }

  TEST_CASE("compact weights through generate: the float64 greedy tokens, 8 bytes per weight at two parties, none "
            "at the owner") {
    for (const std::string fixture : {"llama3-gqa-sharded", "qwen2-bias", "gpt2-bare"}) {
      CAPTURE(fixture);
      const Expected e = expected_of(fixture);
      const ModelConfig c = config_of(fixture);
      const auto results = private_run(fixtures / fixture, e.prompt, e.tokens.size(), true);
      CHECK(results[0].tokens == ref_run(fixture, e).tokens);
      // Beyond the checkpoint's weights, LLaMA keeps the ranking queries'
      // projection (diag(input norm) wq, LayerWeights::wq_ranking), GPT-2 its
      // head beside the centred embedding (load_gpt2); a tied LLaMA head is
      // the embedding read transposed.
      const std::size_t extra = c.architecture == Architecture::gpt2
                                    ? c.vocab_size * c.hidden_size
                                    : c.num_layers * c.hidden_size * c.num_heads * c.head_dim;
      std::vector<std::uint64_t> bytes;
      for (std::size_t i = 0; i < 3; ++i) {
        CHECK(results[i].weights == c.weight_count());
        CHECK(results[i].weight_bytes == (i == 1 ? 0 : 8 * (c.weight_count() + extra)));
        bytes.push_back(results[i].weight_bytes);
      }
      MESSAGE(fixture << ": " << double(bytes[0]) / double(c.weight_count()) << " bytes per weight at parties 0 and 2");
      const std::map<std::string, std::string> pins{
          {"llama3-gqa-sharded", "model.checkpoints.compact_weight_bytes.llama3-gqa-sharded"},
          {"qwen2-bias", "model.checkpoints.compact_weight_bytes.qwen2-bias"},
          {"gpt2-bare", "model.checkpoints.compact_weight_bytes.gpt2-bare"}};
      testing::check_pinned(pins.at(fixture), bytes);
    }
  }

  TEST_CASE("sharded checkpoints: the index is followed, and disagreements are refused by name") {
    const fs::path dir = fixtures / "llama3-gqa-sharded";
    REQUIRE_FALSE(fs::exists(dir / "model.safetensors"));
    const ModelConfig c = config_of("llama3-gqa-sharded");
    Ref p;
    // Through the index directly, or model.safetensors's fallback to it.
    const auto direct = run(load_decoder(p, c, weights_from_file(dir / "model.safetensors.index.json")));
    const auto fallback = run(load_decoder(p, c, weights_from_file(dir / "model.safetensors")));
    CHECK(testing::max_abs_diff(p.to_real(direct.lm_head), p.to_real(fallback.lm_head)) == 0.0);
    CHECK(testing::max_abs(p.to_real(direct.lm_head)) > 0.1);

    const std::string index = read_text(dir / "model.safetensors.index.json");
    auto replaced = [&](const std::string& from, const std::string& to) {
      std::string text = index;
      const auto at = text.find(from);
      REQUIRE(at != std::string::npos);
      return text.replace(at, from.size(), to);
    };
    auto load_error = [&](const Scratch& s) {
      return error_of([&] { run(load_decoder(p, c, weights_from_file(s.dir / "model.safetensors"))); });
    };
    {
      Scratch s("llama3-gqa-sharded");
      fs::remove(s.dir / "model-00002-of-00002.safetensors");
      CHECK(load_error(s).find("shard 'model-00002-of-00002.safetensors' (of tensor 'lm_head.weight') is missing") !=
            std::string::npos);
    }
    {
      Scratch s("llama3-gqa-sharded");  // a truncated shard
      const fs::path shard = s.dir / "model-00001-of-00002.safetensors";
      fs::resize_file(shard, fs::file_size(shard) - 10);
      const auto what = load_error(s);
      CHECK(what.find("model-00001-of-00002.safetensors") != std::string::npos);
      CHECK(what.find("truncated file?") != std::string::npos);
    }
    {
      Scratch s("llama3-gqa-sharded");  // listed in the wrong shard
      s.write("model.safetensors.index.json",
              replaced(R"("model.norm.weight": "model-00002-of-00002.safetensors")",
                       R"("model.norm.weight": "model-00001-of-00002.safetensors")"));
      CHECK(load_error(s).find("tensor 'model.norm.weight' is listed in shard 'model-00001-of-00002.safetensors', "
                               "which does not hold it") != std::string::npos);
    }
    {
      Scratch s("llama3-gqa-sharded");  // the same tensor stored in a second shard
      fs::copy_file(s.dir / "model-00002-of-00002.safetensors", s.dir / "copy.safetensors");
      s.write("model.safetensors.index.json", replaced(R"("model.norm.weight": "model-00002-of-00002.safetensors")",
                                                       R"("model.norm.weight": "copy.safetensors")"));
      CHECK(load_error(s).find("is stored in two places") != std::string::npos);
    }
    {
      Scratch s("llama3-gqa-sharded");  // listed twice in the map
      s.write("model.safetensors.index.json",
              replaced(R"("model.norm.weight": "model-00002-of-00002.safetensors")",
                       R"("model.norm.weight": "model-00002-of-00002.safetensors", "model.norm.weight": "x")"));
      CHECK(load_error(s).find("tensor 'model.norm.weight' is listed twice") != std::string::npos);
    }
    {
      Scratch s("llama3-gqa-sharded");  // a shard outside the folder
      s.write("model.safetensors.index.json", replaced(R"("model.norm.weight": "model-00002-of-00002.safetensors")",
                                                       R"("model.norm.weight": "../elsewhere.safetensors")"));
      CHECK(load_error(s).find("is not a file name in the index's folder") != std::string::npos);
    }
    {
      Scratch s("llama3-gqa-sharded");  // no weights at all
      fs::remove(s.dir / "model.safetensors.index.json");
      CHECK(load_error(s).find("there is no sharded checkpoint model.safetensors.index.json") != std::string::npos);
    }
  }

  TEST_CASE("tied and untied LM heads: a stored head must agree with the config") {
    Ref p;
    const ModelConfig qwen = config_of("qwen2-bias");  // tied, no lm_head.weight stored
    const fs::path qwen_file = fixtures / "qwen2-bias/model.safetensors";
    REQUIRE(weights_from_file(qwen_file).holds("lm_head.weight") == false);
    const auto tied = run(load_decoder(p, qwen, weights_from_file(qwen_file)));
    CHECK(testing::max_abs_diff(p.to_real(tied.lm_head), transpose(p.to_real(tied.embed))) == 0.0);
    // Stored and equal to the embedding (exporters that write both): accepted.
    CHECK_NOTHROW(run(load_decoder(p, qwen, with_lm_head(weights_from_file(qwen_file), "model.embed_tokens.weight", 0))));
    // Stored but different: which one is meant is unclear; refused.
    CHECK(error_of([&] {
            run(load_decoder(p, qwen, with_lm_head(weights_from_file(qwen_file), "model.embed_tokens.weight", 0.5)));
          }).find("'lm_head.weight' differs from 'model.embed_tokens.weight', but config.json says "
                  "tie_word_embeddings is true") != std::string::npos);
    // Untied without a stored head.
    ModelConfig untied = qwen;
    untied.tie_word_embeddings = false;
    CHECK(error_of([&] { run(load_decoder(p, untied, weights_from_file(qwen_file))); })
              .find("no 'lm_head.weight', and config.json says tie_word_embeddings is false") != std::string::npos);
    // GPT-2: the same rules, with wte.
    const ModelConfig gpt2 = config_of("gpt2-bare");
    const fs::path gpt2_file = fixtures / "gpt2-bare/model.safetensors";
    CHECK(error_of([&] { run(load_decoder(p, gpt2, with_lm_head(weights_from_file(gpt2_file), "wte.weight", 0.5))); })
              .find("'lm_head.weight' differs from 'wte.weight'") != std::string::npos);
    ModelConfig gpt2_untied = gpt2;
    gpt2_untied.tie_word_embeddings = false;
    const auto own_head = run(load_decoder(p, gpt2_untied, with_lm_head(weights_from_file(gpt2_file), "wte.weight", 0.5)));
    // (the embedding itself is kept with its rows centred, load_gpt2; the head as stored)
    const RealTensor wte = *weights_from_file(gpt2_file)("wte.weight", {gpt2.vocab_size, gpt2.hidden_size});
    CHECK(p.to_real(own_head.lm_head)(0, 0) == doctest::Approx(wte(0, 0) + 0.5).epsilon(1e-12));
  }

  TEST_CASE("Qwen2 without its biases, or a LLaMA file with biases its config does not ask for, is refused") {
    Ref p;
    ModelConfig no_bias = config_of("qwen2-bias");
    no_bias.qkv_bias = false;
    CHECK(error_of([&] { run(load_decoder(p, no_bias, weights_from_file(fixtures / "qwen2-bias/model.safetensors"))); })
              .find("self_attn.k_proj.bias") != std::string::npos);
    ModelConfig biased = config_of("llama3-gqa-sharded");
    biased.qkv_bias = true;
    CHECK(error_of([&] {
            run(load_decoder(p, biased, weights_from_file(fixtures / "llama3-gqa-sharded/model.safetensors")));
          }).find("missing tensor 'model.layers.0.self_attn.q_proj.bias'") != std::string::npos);
  }

  TEST_CASE("GPT-2 with and without the transformer. prefix computes the same") {
    // gpt2-bare stores bare names and the attn.bias buffers (not weights, never unused).
    const fs::path file = fixtures / "gpt2-bare/model.safetensors";
    REQUIRE(weights_from_file(file).holds("wte.weight") == true);
    REQUIRE(weights_from_file(file).holds("h.0.attn.bias") == true);
    const ModelConfig c = config_of("gpt2-bare");
    auto inner = weights_from_file(file);
    auto prefixed = WeightSource(
        [inner](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
          REQUIRE(name.starts_with("transformer."));
          return inner(name.substr(12), shape);
        },
        {}, [inner](const std::string& name) { return name.starts_with("transformer.") && inner.holds(name.substr(12)) == true; });
    Ref p;
    const auto bare = run(load_decoder(p, c, weights_from_file(file)));
    const auto with_prefix = run(load_decoder(p, c, prefixed));
    CHECK(testing::max_abs_diff(p.to_real(bare.layers[1].down), p.to_real(with_prefix.layers[1].down)) == 0.0);
    CHECK(testing::max_abs(p.to_real(bare.layers[1].down)) > 0.1);
  }
}
