// mpcache-bench --preset speculate: speculative verification against one
// token a step, in one run. For each policy and each K (K = 0 first: the
// baseline), every prompt of a file (one a line; default the held-out
// Persuasion passages, bench/prompts/persuasion-heldout.txt) is generated
// greedily under rss3 with exact truncation, three parties in this
// process. Rows (JSON lines): one per policy and K with tokens per step,
// acceptance per draft position, rounds, bytes and CPU per generated token,
// modelled LAN and WAN latency per generated token (rounds x RTT + bytes /
// bandwidth + this host's compute per token), their ratios to K = 0, and
// whether every prompt's text is K = 0's ("identical").
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <ctime>
#include <fstream>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "drafter_choice.hpp"

namespace mpcache::bench {

namespace {
using nlohmann::json;

struct SpeculateSettings {
  std::string model = std::string(MPCACHE_SOURCE_DIR) + "/tools/model/austen-byte";
  std::string prompts = std::string(MPCACHE_SOURCE_DIR) + "/bench/prompts/persuasion-heldout.txt";
  std::size_t prompt_count = 0;  // 0: every line
  std::string draft = "lookup";
  std::vector<std::size_t> ks = {0, 2, 4, 8};
  std::vector<std::string> policies = {"full", "mpcache"};
  std::size_t tokens = 32;
  std::string json_path;
};

// One prompt's generation: the client's tokens, and per decode step the
// rounds on the critical path, the busiest party's bytes, drafts and
// accepted; the decode steps' CPU time (all three parties: this process).
struct PromptRun {
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint64_t> rounds, bytes;
  std::vector<std::size_t> drafted, accepted;
  double decode_seconds = 0;
  double cpu_seconds = 0;
};

double cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

PromptRun run_prompt(const SpeculateSettings& s, const std::string& policy, std::size_t k,
                     const std::vector<std::uint32_t>& prompt, const Drafter& draft) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  PromptRun run;
  std::array<std::vector<GenerationStep>, 3> steps;
  double cpu_mark = 0;
  auto results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
    GenerationJob job;
    job.model_dir = s.model;
    job.mode.truncation = TruncationMode::exact;
    job.policy = policy;
    job.new_tokens = s.tokens;
    job.rss3.insecure_seed = 5;
    if (id == 0) {
      job.prompt = prompt;
      job.speculate = k;
      job.draft = draft;
    }
    GenerationObserver observer;
    observer.step = [&, id](const GenerationStep& step) {
      // The decode steps' CPU: from the end of the prefill (party 0's).
      if (id == 0 && step.phase == GenerationPhase::prefill) cpu_mark = cpu_now();
      steps[id].push_back(step);
    };
    co_return co_await generate_party(network.endpoint(id), std::move(job), std::move(observer));
  });
  run.cpu_seconds = cpu_now() - cpu_mark;
  run.tokens = results[0].tokens;
  for (std::size_t i = 1; i < steps[0].size(); ++i) {
    std::uint64_t rounds = 0, bytes = 0;
    for (const auto& party : steps) {
      rounds = std::max<std::uint64_t>(rounds, party.at(i).clock_after - party.at(i).clock_before);
      bytes = std::max<std::uint64_t>(bytes, party.at(i).costs.payload_bytes_sent());
    }
    run.rounds.push_back(rounds);
    run.bytes.push_back(bytes);
    run.drafted.push_back(steps[0][i].drafted);
    run.accepted.push_back(steps[0][i].accepted);
    run.decode_seconds += steps[0][i].seconds;
  }
  return run;
}

std::vector<std::string> read_prompts(const SpeculateSettings& s) {
  std::ifstream in(s.prompts);
  if (!in) throw Error(ErrorCode::invalid_argument, "speculate preset: cannot read prompts file " + s.prompts);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  if (s.prompt_count > 0 && out.size() > s.prompt_count) out.resize(s.prompt_count);
  if (out.empty()) throw Error(ErrorCode::invalid_argument, "speculate preset: no prompt in " + s.prompts);
  return out;
}

}  // namespace

int speculate_preset_main(int argc, char** argv) {
  SpeculateSettings s;
  std::string preset;
  CLI::App app{"mpcache-bench --preset speculate: speculative verification against one token a step"};
  app.add_option("--preset", preset)->required();
  app.add_option("--model", s.model, "model folder (byte tokens)")->capture_default_str();
  app.add_option("--prompts", s.prompts, "prompts, one a line")->capture_default_str();
  app.add_option("--prompt-count", s.prompt_count, "the first N prompts (0: all)")->capture_default_str();
  app.add_option("--draft", s.draft, "lookup, ngram:FILE or model:DIR")->capture_default_str();
  app.add_option("--ks", s.ks, "drafts a step to compare (0 is always run first)")->delimiter(',');
  app.add_option("--policies", s.policies, "KV policies")->delimiter(',');
  app.add_option("--tokens", s.tokens, "tokens generated per prompt")->capture_default_str();
  app.add_option("--json", s.json_path, "write the rows as JSON lines to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    jobs::check_drafter_name(s.draft, /*client=*/true);
    if (std::find(s.ks.begin(), s.ks.end(), 0) == s.ks.end()) s.ks.insert(s.ks.begin(), 0);
    std::sort(s.ks.begin(), s.ks.end());
    const auto prompt_texts = read_prompts(s);
    std::vector<std::vector<std::uint32_t>> prompts;
    for (const auto& text : prompt_texts) prompts.emplace_back(text.begin(), text.end());  // byte tokens
    const std::size_t vocab = ModelConfig::from_json_file(s.model + "/config.json").vocab_size;
    const Drafter draft = jobs::drafter_named(s.draft, vocab, [](std::string_view text) {
      return std::vector<std::uint32_t>(text.begin(), text.end());
    });
    const Link lan = link_named("lan"), wan = link_named("wan");
    std::vector<json> rows;
    for (const auto& policy : s.policies) {
      std::vector<std::vector<std::uint32_t>> baseline;  // K = 0's text per prompt
      double base_rounds = 0, base_lan = 0, base_wan = 0;
      for (const std::size_t k : s.ks) {
        std::uint64_t rounds = 0, bytes = 0;
        std::size_t steps = 0, tokens = 0;
        double seconds = 0, cpu = 0;
        std::vector<std::size_t> offered(k, 0), taken(k, 0);  // per draft position
        bool identical = true;
        std::size_t agreeing = 0, compared = 0;  // tokens before the first difference from K = 0's text
        for (std::size_t i = 0; i < prompts.size(); ++i) {
          const PromptRun r = run_prompt(s, policy, k, prompts[i], draft);
          if (k == 0) baseline.push_back(r.tokens);
          else identical = identical && r.tokens == baseline.at(i);
          const auto& base = baseline.at(i);
          const auto differs = std::mismatch(r.tokens.begin(), r.tokens.end(), base.begin(), base.end());
          agreeing += static_cast<std::size_t>(differs.first - r.tokens.begin());
          compared += base.size();
          for (std::size_t j = 0; j < r.rounds.size(); ++j) {
            rounds += r.rounds[j];
            bytes += r.bytes[j];
            tokens += 1 + r.accepted[j];
            for (std::size_t pos = 0; pos < r.drafted[j]; ++pos) {
              ++offered[pos];
              if (r.accepted[j] > pos) ++taken[pos];
            }
          }
          steps += r.rounds.size();
          seconds += r.decode_seconds;
          cpu += r.cpu_seconds;
        }
        const double per_token = 1.0 / double(tokens);
        const double compute = seconds * per_token;  // this host's, all three parties on one loop
        const double lan_s = lan.seconds(double(rounds) * per_token, double(bytes) * per_token) + compute;
        const double wan_s = wan.seconds(double(rounds) * per_token, double(bytes) * per_token) + compute;
        if (k == 0) base_rounds = double(rounds) * per_token, base_lan = lan_s, base_wan = wan_s;
        json acceptance = json::array();
        for (std::size_t pos = 0; pos < k; ++pos)
          acceptance.push_back(offered[pos] ? double(taken[pos]) / double(offered[pos]) : 0.0);
        json row = {{"preset", "speculate"},
                    {"policy", policy},
                    {"k", k},
                    {"draft", k == 0 ? "none" : s.draft},
                    {"prompts", prompts.size()},
                    {"tokens_per_prompt", s.tokens},
                    {"decode_steps", steps},
                    {"decoded_tokens", tokens},
                    {"tokens_per_step", double(tokens) / double(steps)},
                    {"acceptance_per_position", acceptance},
                    {"rounds_per_token", double(rounds) * per_token},
                    {"bytes_max_party_per_token", double(bytes) * per_token},
                    {"cpu_s_per_token", cpu * per_token},
                    {"compute_s_per_token", compute},
                    {"lan_s_per_token", lan_s},
                    {"wan_s_per_token", wan_s},
                    {"rounds_ratio_to_k0", double(rounds) * per_token / base_rounds},
                    {"lan_ratio_to_k0", lan_s / base_lan},
                    {"wan_ratio_to_k0", wan_s / base_wan},
                    {"identical", identical},
                    {"agreeing_prefix_share", compared ? double(agreeing) / double(compared) : 1.0}};
        std::printf("%-8s K=%zu  %5.2f tokens/step  %7.1f rounds/token (%.2fx)  %8.3f MB/token  LAN %.3f s (%.2fx)  "
                    "WAN %.3f s (%.2fx)  text %s\n",
                    policy.c_str(), k, row["tokens_per_step"].get<double>(), row["rounds_per_token"].get<double>(),
                    row["rounds_ratio_to_k0"].get<double>(), double(bytes) * per_token / 1e6, lan_s,
                    row["lan_ratio_to_k0"].get<double>(), wan_s, row["wan_ratio_to_k0"].get<double>(),
                    identical ? "identical" : "DIFFERS");
        std::fflush(stdout);
        rows.push_back(std::move(row));
      }
    }
    if (!s.json_path.empty()) {
      std::ofstream out(s.json_path);
      for (const auto& r : rows) out << r.dump() << "\n";
    }
    // Every policy but the opt-in shared picks must give K = 0's text.
    for (const auto& r : rows)
      if (!r["identical"].get<bool>() && r["policy"] != "mpcache-shared-step") return 1;
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mpcache-bench: %s\n", e.what());
    return 2;
  }
}

}  // namespace mpcache::bench
