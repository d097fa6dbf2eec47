// Preset `decode-batch`: continuous batching's step, in process (three rss3
// parties on one loop, like paper-table8). B sequences, each with a prepared
// KV cache of 64 tokens (random shares) and the full cache, decode 2 steps
// at once with Decoder::decode_batch, for B = 1, 2, 4 and 8, on GPT-2-124M's
// shape (random weights, one layer's weights tied to all 12) and on our
// model's (tools/model/austen-byte's config). Rows: wall time of the steps,
// bytes (busiest party) and rounds on the critical path, per step; the note
// gives per-token figures. B = 1 is the baseline, in the same run.
//
//   mpcache-bench --preset decode-batch [--case gpt2-124m|austen-byte] [--threads N] [--json]
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "bench_case.hpp"
#include "computed.hpp"
#include "op_cases.hpp"
#include "prepared_step.hpp"
#include "three_party.hpp"

namespace mpcache::bench {
namespace {

constexpr std::size_t prompt_tokens = 64, steps = 2;
constexpr std::size_t batches[] = {1, 2, 4, 8};

// One party's side: weights, B sequences with prepared caches, then the
// batched steps inside the measured section.
template <Protocol P>
Task<void> batched_steps(P& p, PartyId id, Section& section, const ModelConfig& config, std::size_t batch) {
  const auto [weights, head] = co_await prepare_step(p, id, config, prompt_tokens);
  const std::size_t kvh = config.num_kv_heads;
  std::vector<std::unique_ptr<Decoder<P>>> decoders;
  std::vector<std::unique_ptr<kv::AnyPolicy<P>>> policies;
  for (std::size_t b = 0; b < batch; ++b) {
    decoders.push_back(std::make_unique<Decoder<P>>(weights));
    policies.push_back(std::make_unique<kv::AnyPolicy<P>>(kv::make_policy<P>("full", prompt_tokens + steps)));
    decoders.back()->start_from_cache(*policies.back(),
                                      std::vector<std::vector<kv::HeadCache<P>>>(config.num_layers, {kvh, head}),
                                      prompt_tokens);
  }
  std::vector<typename P::Share> tokens;
  for (std::size_t b = 0; b < batch; ++b) {
    std::optional<RingTensor> hot;
    if (p.holds_input(0)) {
      hot = ring_zeros({1, config.vocab_size});
      (*hot)(0, (b * 7919 + 13) % config.vocab_size) = 1;
    }
    tokens.push_back(co_await p.input(0, std::move(hot), {1, config.vocab_size}));
  }
  section.begin(id);
  for (std::size_t s = 0; s < steps; ++s) {
    std::vector<typename Decoder<P>::template BatchSlot<kv::AnyPolicy<P>>> slots;
    for (std::size_t b = 0; b < batch; ++b) slots.push_back({decoders[b].get(), policies[b].get(), tokens[b]});
    (void)co_await Decoder<P>::decode_batch(p, std::move(slots));
  }
  section.end(id);
}

}  // namespace

std::vector<CaseResult> decode_batch_preset(const Options& options) {
  std::vector<CaseResult> rows;
  for (const auto& shape : step_shapes()) {
    if (!options.case_name.empty() && options.case_name != shape.name) continue;
    double one_token_s = 0;
    {  // first-touch costs (page faults of fresh weights) out of the way
      Options warm = options;
      warm.repeat = 1;
      (void)measure_case("warm-up", 1, warm, [&](auto& p, PartyId id, Section& section) {
        return batched_steps(p, id, section, shape.config, 1);
      });
    }
    for (std::size_t batch : batches) {
      Options single = options;  // --repeat runs, the median's time
      single.protocol = "rss3";
      CaseResult c = measure_case(
          "decode-batch-" + shape.name + "-b" + std::to_string(batch), batch, single,
          [&](auto& p, PartyId id, Section& section) { return batched_steps(p, id, section, shape.config, batch); });
      // Per step: the section ran `steps` of them.
      c.latency_s /= steps;
      c.bytes_max_party /= steps;
      c.bytes_total /= steps;
      c.frame_bytes_total /= steps;
      c.messages_max_party /= steps;
      c.rounds /= steps;
      if (batch == 1) one_token_s = c.latency_s;
      char note[200];
      std::snprintf(note, sizeof note, "per step of %zu: per token %.4f s, %llu bytes (busiest party); x%.2f tokens/s of batch 1",
                    batch, c.latency_s / double(batch),
                    static_cast<unsigned long long>(c.bytes_max_party / batch),
                    one_token_s > 0 ? one_token_s * double(batch) / c.latency_s : 1.0);
      c.note = note;
      rows.push_back(std::move(c));
    }
  }
  return rows;
}

}  // namespace mpcache::bench
