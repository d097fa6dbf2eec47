// The prefill within a memory budget (modules/model/prefill_memory.cppm):
// the wave plans, and a prefill in waves computing the same rows as one
// without (bit for bit in fixed point), at pinned rounds under rss3.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/parties.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using testing::run;

namespace {
const std::filesystem::path fixture = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";

// Score elements a wave holds: every head's causal blocks of
// causal_block_rows rows, each against keys [0, its end), counted here
// row by row.
std::size_t wave_scores(const RowBlock& b, std::size_t heads) {
  std::size_t scores = 0;
  for (std::size_t r = b.begin; r < b.end; ++r) {
    const std::size_t block_end = std::min(b.end, b.begin + (r - b.begin) / causal_block_rows * causal_block_rows +
                                                      causal_block_rows);
    scores += block_end;
  }
  return heads * scores;
}

// The full cache, keeping the prefill's attention weights it is shown.
template <Protocol P>
struct RecordingPolicy {
  kv::FullCache<P> inner;
  std::vector<std::vector<typename P::Share>> probs;  // per layer, per KV head

  std::string name() const { return "recording"; }
  void reset(std::size_t layers, std::size_t heads) {
    inner.reset(layers, heads);
    probs.assign(layers, {});
  }
  Task<void> after_prefill(P& p, const kv::PrefillView<P>& view) {
    probs.at(view.layer) = *view.probs;
    co_await inner.after_prefill(p, view);
  }
  Task<kv::Selection<P>> select(P& p, const kv::StepView<P>& step) { return inner.select(p, step); }
  Task<void> observe(P& p, const kv::StepView<P>& step, const std::vector<typename P::Share>& w) {
    return inner.observe(p, step, w);
  }
};

std::vector<std::uint32_t> prompt_of(std::size_t n) {
  std::vector<std::uint32_t> prompt;
  for (std::size_t i = 0; i < n; ++i) prompt.push_back(static_cast<std::uint32_t>((i * 37 + 5) % 251));
  return prompt;
}

// A budget that splits the fixture's 100-token prefill into several waves
// (attention and MLP activation alike): 1 MiB.
constexpr std::size_t tight_budget = std::size_t{1} << 20;
constexpr std::size_t prompt_tokens = 100;

struct PlainPrefill {
  RingTensor logits;
  std::vector<std::vector<RingTensor>> probs;  // per layer, per KV head
};

PlainPrefill plain_prefill(std::size_t budget, PrefillLogits logits = PrefillLogits::all) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  Plain p;
  auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
  Decoder<Plain> decoder(weights, DecoderOptions{budget, logits});
  RecordingPolicy<Plain> policy;
  const auto prompt = prompt_of(prompt_tokens);
  PlainPrefill out;
  out.logits = run(decoder.prefill(p, policy, 0, prompt, prompt.size())).value;
  for (const auto& layer : policy.probs) {
    out.probs.emplace_back();
    for (const auto& head : layer) out.probs.back().push_back(head.value);
  }
  return out;
}

// The prefill's logits as reals, on Plain (fixed point) or Ref (float64).
template <class P>
RealTensor real_prefill(std::size_t budget, PrefillLogits logits) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  P p;
  auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
  Decoder<P> decoder(weights, DecoderOptions{budget, logits});
  kv::FullCache<P> full;
  const auto prompt = prompt_of(prompt_tokens);
  const auto out = run(decoder.prefill(p, full, 0, prompt, prompt.size()));
  if constexpr (ExactReals<P>) {
    return p.to_real(out);
  } else {
    return FixedPoint(p.frac_bits()).decode(out.value);
  }
}

struct Rss3Prefill {
  std::uint64_t rounds = 0;  // critical path of the prefill
  std::uint64_t bytes = 0;   // party 0's
  RealTensor logits;
};

Rss3Prefill rss3_prefill(std::size_t budget) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  std::array<RingTensor, 3> opened;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = true, .insecure_seed = 3});
    Rss3 p = state->session();
    auto weights = co_await load_llama(p, c, id == 0 ? weights_from_file(fixture / "model.safetensors") : no_weights());
    Decoder<Rss3> decoder(weights, DecoderOptions{budget});
    kv::FullCache<Rss3> policy;
    const auto prompt = prompt_of(prompt_tokens);
    before[id] = network.endpoint(id).costs();
    auto logits = co_await decoder.prefill(p, policy, 0, id == 0 ? std::optional(prompt) : std::nullopt,
                                           prompt.size());
    after[id] = network.endpoint(id).costs();
    opened[id] = co_await p.reveal(logits);
  });
  CHECK(opened[0] == opened[1]);
  return {testing::critical_rounds(before, after), after[0].payload_bytes_sent() - before[0].payload_bytes_sent(),
          FixedPoint(18).decode(opened[0])};
}

std::size_t argmax_row(const RealTensor& x, std::size_t row) {
  std::size_t best = 0;
  for (std::size_t v = 1; v < x.shape()[1]; ++v)
    if (x(row, v) > x(row, best)) best = v;
  return best;
}
}  // namespace

TEST_SUITE("prefill memory") {
  TEST_CASE("attention waves cover the prompt in order, each within the budget, the fewest greedy ones") {
    for (std::size_t tokens : {1, 7, 100, 1000, 4096})
      for (std::size_t heads : {1, 4, 12})
        for (std::size_t budget : {std::size_t{1}, std::size_t{1} << 20, std::size_t{64} << 20, std::size_t{256} << 20}) {
          CAPTURE(tokens);
          CAPTURE(heads);
          CAPTURE(budget);
          const auto waves = attention_row_blocks(tokens, heads, budget);
          REQUIRE(!waves.empty());
          CHECK(waves.front().begin == 0);
          CHECK(waves.back().end == tokens);
          for (std::size_t w = 0; w < waves.size(); ++w) {
            CHECK(waves[w].end > waves[w].begin);
            if (w > 0) CHECK(waves[w].begin == waves[w - 1].end);
            const bool one_row = waves[w].end - waves[w].begin == 1;
            const std::size_t bytes = prefill_bytes_per_score * wave_scores(waves[w], heads);
            CHECK((one_row || bytes <= budget));
            // Greedy: one row more would not have fit.
            if (waves[w].end < tokens)
              CHECK(prefill_bytes_per_score * wave_scores({waves[w].begin, waves[w].end + 1}, heads) > budget);
          }
        }
    // A prompt that fits is one wave: the unblocked prefill.
    CHECK(attention_row_blocks(100, 2, tight_budget * 64) == std::vector<RowBlock>{{0, 100}});
    // 1000 tokens, 4 heads in 64 MiB (52,428 scores per head): the first
    // wave 308 rows, 9 blocks of 32 and one of 20 (52,240 scores; 309 rows
    // would take 52,569), where a rectangle took 228 rows.
    const auto waves = attention_row_blocks(1000, 4, std::size_t{64} << 20);
    CHECK(waves.front() == RowBlock{0, 308});
    CHECK(causal_scores(RowBlock{0, 308}) == 52240);
    CHECK(causal_scores(RowBlock{0, 309}) == 52569);
  }

  TEST_CASE("causal blocks tile a wave in order; their scores are the staircase under the diagonal") {
    CHECK(causal_blocks(RowBlock{0, 70}) == std::vector<RowBlock>{{0, 32}, {32, 64}, {64, 70}});
    CHECK(causal_blocks(RowBlock{100, 101}) == std::vector<RowBlock>{{100, 101}});
    // 32 x 32 + 32 x 64 + 6 x 70 (a rectangle: 70 x 70 = 4,900).
    CHECK(causal_scores(RowBlock{0, 70}) == 1024 + 2048 + 420);
    // A single row attends to every key up to its own.
    CHECK(causal_scores(RowBlock{999, 1000}) == 1000);
    for (std::size_t begin : {0, 5, 300})
      for (std::size_t rows : {1, 31, 32, 33, 200}) {
        const RowBlock wave{begin, begin + rows};
        CAPTURE(begin);
        CAPTURE(rows);
        CHECK(causal_scores(wave) == wave_scores(wave, 1));
        CHECK(causal_scores(wave) >= rows * begin + rows * (rows + 1) / 2);  // the causal triangle at least
        CHECK(causal_scores(wave) <= rows * wave.end);                     // a rectangle at most
      }
  }

  TEST_CASE("activation waves are near-equal and within the budget") {
    const auto waves = even_row_blocks(100, 80, tight_budget);  // 25.6 kB a row: 40 rows fit
    REQUIRE(waves.size() == 3);
    CHECK(waves[0] == RowBlock{0, 33});
    CHECK(waves[1] == RowBlock{33, 66});
    CHECK(waves[2] == RowBlock{66, 100});
    CHECK(even_row_blocks(100, 80, std::size_t{64} << 20) == std::vector<RowBlock>{{0, 100}});
    CHECK(even_row_blocks(5, 1 << 20, 1).size() == 5);  // at least a row per wave
  }

  TEST_CASE("memory sizes parse with their units and bad ones are refused by name") {
    CHECK(parse_memory_size("4096") == 4096);
    CHECK(parse_memory_size("256MB") == std::size_t{256} << 20);
    CHECK(parse_memory_size("256MiB") == std::size_t{256} << 20);
    CHECK(parse_memory_size("2GB") == std::size_t{2} << 30);
    CHECK(parse_memory_size("512kb") == std::size_t{512} << 10);
    CHECK_THROWS_WITH_AS(parse_memory_size("MB"), doctest::Contains("no number"), Error);
    CHECK_THROWS_WITH_AS(parse_memory_size("0"), doctest::Contains("zero"), Error);
    CHECK_THROWS_WITH_AS(parse_memory_size("12TB"), doctest::Contains("unknown unit 'TB'"), Error);
    CHECK_THROWS_WITH_AS(parse_memory_size("99999999999GB"), doctest::Contains("too large"), Error);
    Ref p;
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    auto weights = run(load_llama(p, c, random_weights(1)));
    CHECK_THROWS_WITH_AS(Decoder<Ref>(weights, DecoderOptions{0}), doctest::Contains("memory budget of 0"), Error);
  }

  TEST_CASE("a prefill in waves gives the same logits and attention weights, bit for bit (fixed point)") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    REQUIRE(attention_row_blocks(prompt_tokens, c.num_heads, tight_budget).size() >= 3);
    REQUIRE(even_row_blocks(prompt_tokens, 2 * c.intermediate_size, tight_budget).size() >= 2);
    const PlainPrefill whole = plain_prefill(default_prefill_memory_budget);
    const PlainPrefill waves = plain_prefill(tight_budget);
    CHECK(whole.logits == waves.logits);
    REQUIRE(whole.probs.size() == c.num_layers);
    REQUIRE(waves.probs.size() == c.num_layers);
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      REQUIRE(waves.probs[l].size() == c.num_kv_heads);
      for (std::size_t j = 0; j < c.num_kv_heads; ++j) CHECK(whole.probs[l][j] == waves.probs[l][j]);
    }
  }

  // Under PrefillLogits::last the last layer runs its attention output and
  // MLP for the last row alone. In float64 that row is the whole prefill's;
  // in fixed point its one-row ops may take other forms (the decode's), so
  // it agrees within fixed-point error and picks the same token.
  TEST_CASE("PrefillLogits::last gives the last position's logits of the whole prefill") {
    const RealTensor whole_ref = real_prefill<Ref>(default_prefill_memory_budget, PrefillLogits::all);
    const RealTensor last_ref = real_prefill<Ref>(default_prefill_memory_budget, PrefillLogits::last);
    REQUIRE(last_ref.shape() == Shape{1, 256});
    double ref_gap = 0;
    for (std::size_t v = 0; v < 256; ++v)
      ref_gap = std::max(ref_gap, std::abs(whole_ref(prompt_tokens - 1, v) - last_ref(0, v)));
    CHECK(ref_gap < 1e-9);

    const RealTensor whole = real_prefill<Plain>(default_prefill_memory_budget, PrefillLogits::all);
    for (std::size_t budget : {default_prefill_memory_budget, tight_budget}) {
      CAPTURE(budget);
      const RealTensor last = real_prefill<Plain>(budget, PrefillLogits::last);
      REQUIRE(last.shape() == Shape{1, 256});
      const double error = testing::max_abs_diff(last, last_ref);
      std::size_t best = 0, best_whole = 0;
      for (std::size_t v = 0; v < 256; ++v) {
        if (last(0, v) > last(0, best)) best = v;
        if (whole(prompt_tokens - 1, v) > whole(prompt_tokens - 1, best_whole)) best_whole = v;
      }
      MESSAGE("PrefillLogits::last, fixed point vs float64: max |logit error| = " << error);
      CHECK(error < 5e-2);
      CHECK(best == best_whole);
    }
  }

  TEST_CASE("a policy that does not read the prompt's attention weights is given none") {
    // The full cache says so; MPCache only when it evicts (and does not share a layer's choice).
    CHECK_FALSE(kv::OptionalMembers<Plain>::reads_prefill_attention(kv::FullCache<Plain>{}, 0, 100));
    CHECK_FALSE(kv::OptionalMembers<Plain>::reads_prefill_attention(kv::MpCache<Plain>(48), 0, 100));
    CHECK(kv::OptionalMembers<Plain>::reads_prefill_attention(kv::MpCache<Plain>(48, kv::MpCacheOptions::paper()), 0, 100));
    CHECK_FALSE(kv::OptionalMembers<Plain>::reads_prefill_attention(kv::MpCache<Plain>(48, kv::MpCacheOptions::paper()), 3, 100));
    CHECK(kv::OptionalMembers<Plain>::reads_prefill_attention(RecordingPolicy<Plain>{}, 0, 100));  // the default
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    Plain p;
    auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
    for (std::size_t budget : {default_prefill_memory_budget, tight_budget}) {
      Decoder<Plain> decoder(weights, DecoderOptions{budget});
      bool empty = false;
      struct Probe : kv::FullCache<Plain> {
        bool* seen_empty;
        Task<void> after_prefill(Plain&, const kv::PrefillView<Plain>& view) {
          *seen_empty = view.probs->empty();
          co_return;
        }
      } probe{{}, &empty};
      const auto prompt = prompt_of(prompt_tokens);
      (void)run(decoder.prefill(p, probe, 0, prompt, prompt.size()));
      CHECK(empty);
    }
  }

  TEST_CASE("rss3: waves cost their rounds, pinned, and choose the same tokens") {
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    const auto attention_waves = attention_row_blocks(prompt_tokens, c.num_heads, tight_budget);
    const auto activation_waves = even_row_blocks(prompt_tokens, 2 * c.intermediate_size, tight_budget);
    const Rss3Prefill whole = rss3_prefill(default_prefill_memory_budget);
    const Rss3Prefill waves = rss3_prefill(tight_budget);
    MESSAGE("prefill of " << prompt_tokens << " tokens: one wave " << whole.rounds << " rounds, "
                          << whole.bytes << " bytes; " << attention_waves.size() << " attention and "
                          << activation_waves.size() << " activation waves " << waves.rounds << " rounds, "
                          << waves.bytes << " bytes");
    // 220 and 558 before the norms and softmax sums took octave pieces
    // (ops/octaves.cppm: at most 256 rows on the circuit's boolean one-hot);
    // 188 and 496 before a prefill's activation took one polynomial per
    // element after its comparisons (ops::piecewise_selected: 5 rounds more
    // in each of its waves, about half the bytes).
    // 203 and 544 rounds, 17.2 and 13.3 MB, before the waves ran in causal
    // blocks (no scores above the diagonal blocks), the weights' normalisation
    // moved to the outputs (ops::softmax_apply), the row max took pairs by
    // the difference planned on all rows at once and exp's clip 50 bits.
    // Waves: 2 layers x (3 attention waves more + 2 activation waves more).
    testing::check_pinned("model.prefill_waves.rss3.rounds", std::vector<std::uint64_t>{whole.rounds, waves.rounds});
    // Causal blocks leave the waves no masked rectangle to save; smaller
    // waves plan their tournaments on fewer rows (wider groups): more bytes.
    testing::check_pinned("model.prefill_waves.rss3.bytes", std::vector<std::uint64_t>{whole.bytes, waves.bytes});
    for (std::size_t t = 0; t < prompt_tokens; ++t) CHECK(argmax_row(whole.logits, t) == argmax_row(waves.logits, t));
    CHECK(testing::max_abs_diff(whole.logits, waves.logits) < 1e-2);
  }

  TEST_CASE("a one-hot prompt asked for a wave of rows at a time gives the prefill of its tokens") {
    // A service's client sends its prompt as a secret one-hot; each server
    // assembles the rows a wave asks for (client_shares::assemble_rows).
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    Plain p;
    auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
    const auto prompt = prompt_of(prompt_tokens);
    RingTensor hot = ring_zeros({prompt.size(), c.vocab_size});
    for (std::size_t t = 0; t < prompt.size(); ++t) hot(t, prompt[t]) = 1;
    for (std::size_t budget : {default_prefill_memory_budget, tight_budget}) {
      CAPTURE(budget);
      Decoder<Plain> by_ids(weights, DecoderOptions{budget}), by_rows(weights, DecoderOptions{budget});
      kv::FullCache<Plain> a, b;
      const RingTensor expected = run(by_ids.prefill(p, a, 0, prompt, prompt.size())).value;
      std::vector<RowBlock> asked;
      const RingTensor got = run(by_rows.prefill_one_hot(p, b, prompt.size(), [&](RowBlock wave) {
                               asked.push_back(wave);
                               RingTensor rows = RingTensor::from_shape({wave.end - wave.begin, c.vocab_size});
                               std::copy(hot.data() + wave.begin * c.vocab_size, hot.data() + wave.end * c.vocab_size,
                                         rows.data());
                               return PlainShare{rows};
                             })).value;
      CHECK(got == expected);
      // The waves tile the prompt in order, each within the budget.
      REQUIRE(!asked.empty());
      CHECK(asked.front().begin == 0);
      CHECK(asked.back().end == prompt.size());
      for (std::size_t w = 0; w < asked.size(); ++w) {
        if (w > 0) CHECK(asked[w].begin == asked[w - 1].end);
        CHECK((asked[w].end - asked[w].begin) * c.vocab_size * prefill_bytes_per_one_hot <= budget);
      }
      CHECK((asked.size() > 1) == (budget == tight_budget));
    }
    // Rows of the wrong count are refused by name.
    Decoder<Plain> decoder(weights, DecoderOptions{tight_budget});
    kv::FullCache<Plain> policy;
    CHECK_THROWS_WITH(run(decoder.prefill_one_hot(p, policy, prompt.size(),
                                                  [&](RowBlock) { return PlainShare{ring_zeros({1, c.vocab_size})}; })),
                      doctest::Contains("one-hot rows [0, 50) came as (1,256)"));
  }
}
