// Preset `speculate-rows`: what a speculative step of K+1 rows costs
// against a step of one, in process (three rss3 parties on one loop, like
// decode-batch), on GPT-2-124M's shape (random weights, one layer's weights
// tied to all 12, so acceptance means nothing) and on our model's. A
// sequence with a prepared KV cache of 64 tokens (random shares, full
// cache) runs one step: K = 0 is a decode, its argmax and the token opened
// to the client; K = 1, 2, 4, 8 is verify_drafts (the client's input of
// K+1 tokens, the rows, their argmaxes, the acceptance and the openings).
// Rows: wall time, bytes (busiest party) and rounds on the critical path of
// the step; K = 0 is the baseline, in the same run.
//
//   mpcache-bench --preset speculate-rows [--case gpt2-124m|austen-byte] [--json]
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "bench_case.hpp"
#include "computed.hpp"
#include "op_cases.hpp"
#include "prepared_step.hpp"
#include "three_party.hpp"

namespace mpcache::bench {
namespace {

constexpr std::size_t prompt_tokens = 64;
constexpr std::size_t drafts[] = {0, 1, 2, 4, 8};

// One party's side: weights, a sequence with a prepared cache, then one
// step (K = 0: a decode and its token; else a verified step) in the section.
template <Protocol P>
Task<void> one_step(P& p, PartyId id, Section& section, const ModelConfig& config, std::size_t k) {
  const auto [weights, head] = co_await prepare_step(p, id, config, prompt_tokens);
  const std::size_t kvh = config.num_kv_heads;
  Decoder<P> decoder(weights);
  auto policy = kv::make_policy<P>("full", prompt_tokens + k + 1);
  decoder.start_from_cache(policy, std::vector<std::vector<kv::HeadCache<P>>>(config.num_layers, {kvh, head}),
                           prompt_tokens);
  std::optional<std::vector<std::uint32_t>> rows;
  if (id == 0) {
    rows.emplace();
    for (std::size_t i = 0; i <= k; ++i) rows->push_back(static_cast<std::uint32_t>((i * 7919 + 13) % config.vocab_size));
  }
  section.begin(id);
  if (k == 0) {
    const std::optional<std::uint32_t> token = rows ? std::optional<std::uint32_t>(rows->front()) : std::nullopt;
    const auto logits = co_await decoder.decode(p, policy, 0, token);
    (void)co_await p.reveal_to(0, co_await next_token(p, logits));
  } else {
    (void)co_await verify_drafts(p, decoder, policy, 0, std::move(rows), k);
  }
  section.end(id);
}

}  // namespace

std::vector<CaseResult> speculate_rows_preset(const Options& options) {
  std::vector<CaseResult> rows;
  for (const auto& shape : step_shapes()) {
    if (!options.case_name.empty() && options.case_name != shape.name) continue;
    CaseResult one_row;
    for (const std::size_t k : drafts) {
      Options single = options;
      single.protocol = "rss3";
      CaseResult c = measure_case("speculate-rows-" + shape.name + "-k" + std::to_string(k), k + 1, single,
                                  [&](auto& p, PartyId id, Section& section) {
                                    return one_step(p, id, section, shape.config, k);
                                  });
      if (k == 0) one_row = c;
      char note[200];
      std::snprintf(note, sizeof note, "%zu rows: x%.3f the rounds, x%.2f the bytes, x%.2f the time of one row", k + 1,
                    double(c.rounds) / double(one_row.rounds), double(c.bytes_max_party) / double(one_row.bytes_max_party),
                    c.latency_s / one_row.latency_s);
      c.note = note;
      rows.push_back(std::move(c));
    }
  }
  return rows;
}

}  // namespace mpcache::bench
