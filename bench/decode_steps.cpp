// mpcache-decode-steps [--tokens N] [--prompt-bytes B] [--budget K] [--policies full,mpcache,...]
//                      [--late-ranking] [--protocol P] [--truncation T] [--comparisons C,C,...]
//                      [--offline-budget MIB] [--pairs-budget MIB]
// Private decoding of our model under rss3 or add2 (three parties in one
// process, in-process transport): rounds and payload bytes (busiest party)
// of the prefill and of every decode step, for each policy and each way of
// comparing (a list runs them side by side). Under add2 the bytes are the
// online parties' (0 and 1); the dealer's, sent offline, are printed apart.
// Under rss3 with dcf comparisons every party deals some comparisons
// during the online phase: its keys are in its bytes, and the busiest
// dealer's share is printed too. With dcf+offline (rss3) the parties fill
// their stores before each decode step (Rss3Party::prepare_comparisons, per
// width the previous step's demand + 5% + 64, within --offline-budget):
// those bytes and seconds are printed as offline, apart from the online
// step; step 0 has no previous step and runs dry (its ran-dry count says
// so), and the prefill compares on the circuit (as generate_party). With --truncation exact+offline (rss3) they also make truncation
// pairs before each decode step (Rss3::refill_truncation_pairs, per
// shift: 16 times the previous step's exact fused truncations + 64, within
// --pairs-budget; the session's stream takes them and its forks take
// halves in turn), so that an exact product takes one round; printed like
// the stores. Step 0 follows the prefill and has none. Counts, not timings (but offline seconds and the last step's
// seconds per operator): deterministic, so before/after comparisons of a
// change are exact. The last step's seconds per operator are the wall
// time charged to each tag at the party with the longest chain (the time
// up to each round goes to the tag of the message that ends the wait); the
// three parties share this process's one thread, so they add up their
// compute: read them as shares, or divide by three.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <CLI/CLI.hpp>
import mpcache;
#include "fidelity_common.hpp"
#include "process_allocator.hpp"
#include "dcf_store.hpp"
#include "protocol_mode_flags.hpp"

using namespace mpcache;

namespace {

struct Costs {
  std::uint64_t rounds = 0, bytes = 0, offline_bytes = 0;
  std::uint64_t dealt_bytes = 0;  // rss3 dcf: the most any party dealt (part of its bytes)
};

// `online` parties: all three under rss3; under add2 parties 0 and 1, the
// dealer's bytes are offline (it receives nothing, so it adds no round).
Costs busiest(const std::array<CostCounters, 3>& before, const std::array<CostCounters, 3>& after, bool add2,
              const std::array<std::uint64_t, 3>& dealt_before, const std::array<std::uint64_t, 3>& dealt_after) {
  Costs c;
  for (std::size_t i = 0; i < 3; ++i) c.dealt_bytes = std::max(c.dealt_bytes, dealt_after[i] - dealt_before[i]);
  CriticalPath path;
  for (std::size_t i = 0; i < 3; ++i) {
    path.add(before[i].rounds, after[i].rounds);
    const std::uint64_t sent = (after[i] - before[i]).payload_bytes_sent();
    if (add2 && i == add2_dealer) c.offline_bytes = sent;
    else c.bytes = std::max(c.bytes, sent);
  }
  c.rounds = path.rounds();
  return c;
}

struct Settings {
  std::size_t tokens = 16, prompt = 1000, budget = 48;
  bool late_ranking = false;
  // dcf+offline: keys dealt ahead into a store before each step;
  // exact+offline: truncation pairs made ahead before each step.
  ProtocolMode mode;
};

// What the dcf stores did in one step, summed or maxed over the parties.
struct OfflineStep {
  std::uint64_t bytes = 0;  // the busiest dealer's offline bytes before the step
  double seconds = 0;       // the slowest party's prepare_comparisons before the step
  std::uint64_t ran_dry = 0, store_peak = 0;
};

// The backend's keys: rss3, or add2 with parties 0 and 1 online.
Task<std::unique_ptr<Rss3Party>> setup(std::type_identity<Rss3Party>, Endpoint& endpoint, const Settings& s) {
  return Rss3Party::setup(endpoint, s.mode.rss3({.insecure_seed = 1}));
}
Task<std::unique_ptr<Add2Party>> setup(std::type_identity<Add2Party>, Endpoint& endpoint, const Settings& s) {
  return Add2Party::setup(endpoint, s.mode.add2({.insecure_seed = 1}));
}

std::vector<std::uint32_t> prompt_bytes(std::size_t n) {
  const std::string text =
      "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
      "must be in want of a wife. However little known the feelings or views of such a man may be "
      "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
      "surrounding families, that he is considered the rightful property of some one or other of "
      "their daughters. ";
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<unsigned char>(text[i % text.size()]));
  return out;
}

template <class Party>
void run(const std::string& policy, const Settings& settings) {
  using P = decltype(std::declval<Party&>().session());
  constexpr bool add2 = std::is_same_v<Party, Add2Party>;
  const std::size_t tokens = settings.tokens, prompt_len = settings.prompt, budget = settings.budget;
  const std::string dir = std::string(MPCACHE_SOURCE_DIR) + "/tools/model/austen-byte";
  const ModelConfig c = ModelConfig::from_json_file(dir + "/config.json");
  const auto prompt = prompt_bytes(prompt_len);
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  // marks[k]: where window k starts; ends[k]: where window k - 1 ends (before
  // the stores are filled for window k, so that offline work is in neither).
  std::vector<std::array<CostCounters, 3>> marks(tokens + 2), ends(tokens + 2);
  std::vector<std::array<std::uint64_t, 3>> dealt(tokens + 2, std::array<std::uint64_t, 3>{});
  // rss3 dcf counters at each mark, and before each step's prepare.
  std::vector<std::array<Rss3DcfStats, 3>> stats(tokens + 2), before_prepare(tokens + 2);
  std::vector<std::array<Rss3TruncationStats, 3>> pair_stats(tokens + 2), pairs_before_prepare(tokens + 2);
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto state = co_await setup(std::type_identity<Party>{}, network.endpoint(id), settings);
    P p = state->session();
    const WeightSource source = id == 1 ? weights_from_file(dir + "/model.safetensors") : no_weights();
    auto weights = co_await load_decoder(p, c, source, /*owner=*/1);
    Decoder<P> decoder(weights);
    decoder.set_early_ranking(!settings.late_ranking);
    auto made = bench::make_policy<P>(policy, budget);
    if (!made) throw Error(ErrorCode::invalid_argument, "policy " + policy + " cannot work with a budget of " +
                                                            std::to_string(budget));
    auto pol = std::move(*made);
    std::optional<std::vector<std::uint32_t>> mine;
    if (id == 0) mine = prompt;
    marks[0][id] = network.endpoint(id).costs();
    if constexpr (!add2) {
      dealt[0][id] = state->dealt_bytes();
      stats[0][id] = before_prepare[0][id] = state->dcf_stats();
      pair_stats[0][id] = pairs_before_prepare[0][id] = state->truncation_stats();
    }
    // The phases as generate_party's (StepDriver: the prefill and its token
    // choice compare on the circuit, then the refills before each decode
    // step), but on the circuit only under a store (plain dcf deals the
    // prefill's keys inline here), and the stores filled by the benches'
    // policy (bench::fill_for_next_step: from the previous step's demand in
    // every slot seen so far; none before step 0, which runs dry).
    typename StepDriver<P>::Options driver_options{.circuit_prefill = CircuitPrefill::under_store};
    if constexpr (!add2)
      driver_options.refill_comparisons = [&, id](P&, std::size_t step, std::size_t) -> Task<bool> {
        if (!settings.mode.comparison_store() || step == 0) co_return false;
        co_await bench::fill_for_next_step(*state, stats[step][id], before_prepare[step + 1][id]);
        co_return true;
      };
    StepDriver<P> driver(p, std::move(driver_options));
    driver.before_prefill();
    auto logits = co_await decoder.prefill(p, pol, 0, std::move(mine), prompt.size());
    for (std::size_t step = 0; step <= tokens; ++step) {
      // token choice (argmax over the vocabulary, opened to the client) + one decode
      auto token = co_await p.reveal_to(0, co_await next_token(p, logits));
      if (step == 0) driver.after_prefill(std::max<std::size_t>(prompt.size(), 1));
      std::optional<std::uint32_t> next;
      if (token) next = static_cast<std::uint32_t>((*token)(0, 0));
      ends[step + 1][id] = network.endpoint(id).costs();
      if constexpr (!add2) {
        before_prepare[step + 1][id] = state->dcf_stats();
        pairs_before_prepare[step + 1][id] = state->truncation_stats();
      }
      // Truncation pairs (after the prefill from its demand per prompt
      // token), then the stores for the next step from the previous one's
      // demand (the same at every party, so all prepare alike).
      if (step < tokens) (void)co_await driver.before_step(step);
      if constexpr (!add2) {
        stats[step + 1][id] = state->dcf_stats();
        pair_stats[step + 1][id] = state->truncation_stats();
        dealt[step + 1][id] = state->dealt_bytes();
      }
      marks[step + 1][id] = network.endpoint(id).costs();
      if (step < tokens) logits = co_await decoder.decode(p, pol, 0, next);
    }
  });
  const Costs pre = busiest(marks[0], ends[1], add2, dealt[0], dealt[1]);
  const std::string backend = std::string(protocol_backend_name(settings.mode.backend)) + ", " +
                              comparisons_name(settings.mode.comparisons) + " comparisons, ";
  // The truncation pairs made before step s, and how step s truncated.
  struct PairsStep {
    std::uint64_t bytes = 0, one_round = 0, two_round = 0, ran_dry = 0;
    double seconds = 0;
  };
  auto pairs_step = [&](std::size_t s) {
    PairsStep o;
    for (std::size_t i = 0; i < 3; ++i) {
      o.bytes = std::max(o.bytes, pair_stats[s + 1][i].offline_bytes - pairs_before_prepare[s + 1][i].offline_bytes);
      o.seconds = std::max(o.seconds, pair_stats[s + 1][i].offline_seconds - pairs_before_prepare[s + 1][i].offline_seconds);
    }
    o.one_round = pairs_before_prepare[s + 2][0].from_pairs - pair_stats[s + 1][0].from_pairs;
    o.two_round = pairs_before_prepare[s + 2][0].two_round - pair_stats[s + 1][0].two_round;
    o.ran_dry = pairs_before_prepare[s + 2][0].ran_dry - pair_stats[s + 1][0].ran_dry;
    return o;
  };
  // Offline work before step s (window s + 1 -> s + 2) and what ran dry in it.
  auto offline_step = [&](std::size_t s) {
    OfflineStep o;
    for (std::size_t i = 0; i < 3; ++i) {
      o.bytes = std::max(o.bytes, stats[s + 1][i].offline_bytes - before_prepare[s + 1][i].offline_bytes);
      o.seconds = std::max(o.seconds, stats[s + 1][i].offline_seconds - before_prepare[s + 1][i].offline_seconds);
      o.ran_dry += stats[s + 2][i].ran_dry - stats[s + 1][i].ran_dry;
      o.store_peak = std::max(o.store_peak, stats[s + 2][i].store_peak);
    }
    return o;
  };
  auto offline = [&](const Costs& cost) {
    if (add2) return " (+ " + std::to_string(double(cost.offline_bytes) / 1e6) + " MB offline from the dealer)";
    if (settings.mode.dcf()) return " (of which " + std::to_string(double(cost.dealt_bytes) / 1e6) + " MB dealt keys)";
    return std::string();
  };
  std::printf("%s (%s%s truncation): prefill %zu bytes (+ first token choice): %llu rounds, %.3f MB%s\n", policy.c_str(),
              backend.c_str(), truncation_name(settings.mode.truncation), prompt_len,
              static_cast<unsigned long long>(pre.rounds), double(pre.bytes) / 1e6, offline(pre).c_str());
  if (!add2 && settings.mode.comparison_store()) {
    std::uint64_t dry = 0;
    for (std::size_t i = 0; i < 3; ++i) dry += stats[1][i].ran_dry;
    std::printf("  prefill: %llu dealt parts ran dry\n", static_cast<unsigned long long>(dry));
  }
  std::uint64_t sum_r = 0, sum_b = 0, sum_off = 0, sum_dealt = 0, steady = 0;
  std::uint64_t filled_r = 0, filled_b = 0, filled_off = 0, filled_dry = 0, filled_steps = 0;
  double filled_s = 0;
  for (std::size_t s = 0; s < tokens; ++s) {
    const Costs step = busiest(marks[s + 1], ends[s + 2], add2, dealt[s + 1], dealt[s + 2]);
    std::printf("  step %2zu: %5llu rounds, %8.3f MB%s", s, static_cast<unsigned long long>(step.rounds),
                double(step.bytes) / 1e6, offline(step).c_str());
    if (!add2 && settings.mode.dcf()) {
      const OfflineStep o = offline_step(s);
      std::printf("; offline before it %.3f MB, %.3f s; ran dry %llu; store peak %.1f MB", double(o.bytes) / 1e6,
                  o.seconds, static_cast<unsigned long long>(o.ran_dry), double(o.store_peak) / 1e6);
      if (settings.mode.comparison_store() && s >= 1) {
        filled_off += o.bytes;
        filled_s += o.seconds;
        filled_dry += o.ran_dry;
      }
    }
    if (settings.mode.truncation_pairs()) {
      const PairsStep o = pairs_step(s);
      std::printf("; pairs made before it %.3f MB, %.3f s; truncated elements %llu in one round, %llu in two; "
                  "grants short %llu", double(o.bytes) / 1e6, o.seconds, static_cast<unsigned long long>(o.one_round),
                  static_cast<unsigned long long>(o.two_round), static_cast<unsigned long long>(o.ran_dry));
      if (s >= 1) {
        filled_off += o.bytes;
        filled_s += o.seconds;
      }
    }
    if ((settings.mode.comparison_store() || settings.mode.truncation_pairs()) && s >= 1) {
      filled_r += step.rounds;
      filled_b += step.bytes;
      ++filled_steps;
    }
    std::printf("\n");
    sum_r += step.rounds;
    sum_b += step.bytes;
    sum_off += step.offline_bytes;
    sum_dealt += step.dealt_bytes;
    steady = step.rounds;
  }
  std::printf("  mean per token (decode + token choice): %.1f rounds (%.1f per layer), %.3f MB; last step %llu rounds\n",
              double(sum_r) / double(tokens), double(sum_r) / double(tokens) / double(c.num_layers),
              double(sum_b) / double(tokens) / 1e6, static_cast<unsigned long long>(steady));
  if (add2) std::printf("  mean offline per token (dealer): %.3f MB\n", double(sum_off) / double(tokens) / 1e6);
  if (!add2 && settings.mode.dcf())
    std::printf("  mean dealt per token (busiest dealer, online, in the MB above): %.3f MB\n",
                double(sum_dealt) / double(tokens) / 1e6);
  if (filled_steps > 0)
    std::printf("  steps 1-%zu (stores filled before each): %.1f rounds (%.1f per layer), online %.3f MB, offline "
                "%.3f MB and %.3f s per token, ran dry %llu\n",
                tokens - 1, double(filled_r) / double(filled_steps),
                double(filled_r) / double(filled_steps) / double(c.num_layers), double(filled_b) / double(filled_steps) / 1e6,
                double(filled_off) / double(filled_steps) / 1e6, filled_s / double(filled_steps),
                static_cast<unsigned long long>(filled_dry));
  // Where a phase's rounds and bytes went, at the party with the longest chain.
  auto print_by_operator = [&](const char* what, std::size_t from, std::size_t to) {
    std::size_t busiest_party = 0;
    for (std::size_t i = 1; i < 3; ++i)
      if (ends[to][i].rounds > ends[to][busiest_party].rounds) busiest_party = i;
    const CostCounters part = ends[to][busiest_party] - marks[from][busiest_party];
    std::printf("  %s by operator (rounds, MB, wall s of the three parties on one thread):", what);
    for (std::size_t t = 0; t < cost_tag_count; ++t)
      if (part.by_tag[t].rounds > 0 || part.by_tag[t].payload_bytes_sent > 0)
        std::printf(" %s %llu %.2f %.3f;", std::string(cost_tag_name(static_cast<CostTag>(t))).c_str(),
                    static_cast<unsigned long long>(part.by_tag[t].rounds), double(part.by_tag[t].payload_bytes_sent) / 1e6,
                    part.by_tag[t].seconds);
    std::printf("\n");
  };
  print_by_operator("prefill", 0, 1);
  if (tokens > 0) print_by_operator("last step", tokens, tokens + 1);
}

}  // namespace

int main(int argc, char** argv) {
  mpcache::jobs::tune_allocator_for_party();  // as the parties of `mpcache generate`
  Settings settings;
  std::vector<std::string> policy_names{"full", "mpcache"};
  // The paper's one-round probabilistic truncation unless asked otherwise;
  // the stores' budgets as the paper presets'.
  jobs::ProtocolModeFlags mode_flags;
  mode_flags.truncation = truncation_name(TruncationMode::probabilistic);
  mode_flags.store_budget_mib = 256;
  CLI::App app{"mpcache-decode-steps: rounds and bytes of private prefill and decode steps, per policy (in-process)"};
  app.add_option("--tokens", settings.tokens, "decode steps");
  app.add_option("--prompt-bytes", settings.prompt, "prompt length (bytes of a fixed English text)");
  app.add_option("--budget", settings.budget, "tokens per KV head a policy attends to");
  app.add_option("--policies", policy_names, "full, mpcache[-bound|-noshare|-noevict|-flat|-rmax|-hier...], quest, ...")
      ->delimiter(',');
  app.add_flag("--late-ranking", settings.late_ranking,
               "rank after the norm (no early ranking), for before/after comparisons");
  jobs::add_protocol_mode_options(app, mode_flags, {.side_by_side = true});
  CLI11_PARSE(app, argc, argv);
  try {
    for (const auto& name : policy_names) bench::check_policy_name(name);
    const auto modes = mode_flags.modes();
    for (const auto& name : policy_names)
      for (const auto& mode : modes) {
        settings.mode = mode;
        if (mode.backend == ProtocolBackend::add2) run<Add2Party>(name, settings);
        else run<Rss3Party>(name, settings);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
