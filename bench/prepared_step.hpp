// What the step presets (decode-batch, speculate-rows) share: the two model
// shapes they run, and one party's weights with a prepared KV head of
// random shares, so that a measured step starts from a cache of `tokens`
// without a prefill. Include after `import mpcache;`.
#pragma once

namespace mpcache::bench {

struct StepShape {
  std::string name;
  ModelConfig config;
};

// GPT-2-124M's shape (random weights) and our model's (tools/model/austen-byte).
inline std::vector<StepShape> step_shapes() {
  ModelConfig gpt2{.architecture = Architecture::gpt2, .vocab_size = 50257, .hidden_size = 768,
                   .intermediate_size = 3072, .num_layers = 12, .num_heads = 12, .num_kv_heads = 12,
                   .head_dim = 64, .max_positions = 1024, .tie_word_embeddings = true};
  const ModelConfig austen =
      ModelConfig::from_json_file(std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/austen-byte/config.json");
  return {{"gpt2-124m", gpt2}, {"austen-byte", austen}};
}

template <Protocol P>
struct PreparedStep {
  DecoderWeights<P> weights;  // one layer's random weights (party 1's), tied to every layer
  kv::HeadCache<P> head;      // (tokens, d) random keys and values (party 0's)
};

template <Protocol P>
Task<PreparedStep<P>> prepare_step(P& p, PartyId id, const ModelConfig& config, std::size_t tokens) {
  ModelConfig one = config;
  one.num_layers = 1;
  auto weights = tie_layers(co_await load_decoder(p, one, id == 1 ? random_weights(5) : no_weights(), 1), config.num_layers);
  const WeightSource values = id == 0 ? random_weights(9, 1 / std::sqrt(3.0)) : no_weights();
  auto secret = [&](const mpcache::Shape& shape) -> Task<typename P::Share> {
    co_return jobs::computed<P>(co_await ops::secret_real(p, 0, values("prepared-cache", shape), shape));
  };
  const std::size_t d = config.head_dim;
  kv::HeadCache<P> head{co_await secret({tokens, d}), co_await secret({tokens, d})};
  co_return PreparedStep<P>{std::move(weights), std::move(head)};
}

}  // namespace mpcache::bench
