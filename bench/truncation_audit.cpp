// mpcache-bench --preset truncation-audit: where would private decoding's
// truncations fail? rss3's truncation of x fails (off by ~2^(64-d)) with
// probability about (|x|+1)/2^64 per element. This preset runs the same
// decoder code on `plain`, which sees every x exactly, over --prompts
// held-out prompts of --prompt-bytes bytes and --tokens greedy steps, and
// adds those probabilities up per call site (file:line of the truncating
// call). A site whose expected failures per prompt are not far below 1 is a
// numerics bug that only a long private run would otherwise show.
//
// Some sites truncate values that are then multiplied by an exact 0, where
// a failure is harmless and the audit overcounts: exp's squarings below its
// clip (exp.cppm), polynomial pieces evaluated outside their segment
// (piecewise.cppm), masked scores. Read the others as real risk.
//
// One JSON line per policy, phase (prefill: the prompt and the first token;
// decode: each later step) and call site, the largest first (--top per
// phase), then one "total" line per policy and phase:
//   expected_failures  per prompt (prefill) or per decoded token (decode)
//   max_log2           log2 of the largest |x| truncated there
//   elements           elements truncated there per prompt or token
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <iostream>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "fidelity_common.hpp"

namespace mpcache::bench {
namespace {

using json = nlohmann::json;

struct Settings : HeldOutRun {
  Settings() {
    policies = {"full", "mpcache"};
    tokens = 8;
  }
  std::size_t top = 12;
};

struct PhaseAudits {
  std::shared_ptr<TruncationAudit> prefill = std::make_shared<TruncationAudit>();
  std::shared_ptr<TruncationAudit> decode = std::make_shared<TruncationAudit>();
};

// Prefill and greedy decoding on plain, each phase recorded in its audit.
void audit_prompt(Scheduler& scheduler, const DecoderWeights<Plain>& weights, const std::string& policy_name,
                  std::size_t budget, const std::vector<std::uint32_t>& prompt, std::size_t tokens,
                  PhaseAudits& audits) {
  Plain p;
  Decoder<Plain> decoder(weights);
  auto policy = *make_policy<Plain>(policy_name, budget);
  sync_wait(scheduler, [&]() -> Task<void> {
    std::optional<std::uint32_t> next;
    for (std::size_t step = 0; step < tokens; ++step) {
      p.audit_truncations(step == 0 ? audits.prefill : audits.decode);
      auto logits = step == 0 ? co_await decoder.prefill(p, policy, 0, prompt, prompt.size())
                              : co_await decoder.decode(p, policy, 0, next);
      const std::size_t rows = Plain::shape(logits).at(0);
      auto token = co_await p.reveal(co_await next_token(p, ops::rows<Plain>(logits, rows - 1, rows)));
      next = static_cast<std::uint32_t>(token(0, 0));
    }
    p.audit_truncations(nullptr);
  }());
}

void print_phase(const std::string& policy, const std::string& phase, const TruncationAudit& audit, double per,
                 std::size_t top) {
  std::vector<std::pair<std::string, TruncationSite>> sites(audit.sites.begin(), audit.sites.end());
  std::ranges::sort(sites, [](const auto& a, const auto& b) {
    return a.second.expected_failures > b.second.expected_failures;
  });
  for (std::size_t i = 0; i < std::min(top, sites.size()); ++i) {
    const auto& [where, site] = sites[i];
    std::cout << json{{"preset", "truncation-audit"},
                      {"row", "site"},
                      {"policy", policy},
                      {"phase", phase},
                      {"site", where},
                      {"expected_failures", site.expected_failures / per},
                      {"max_log2", site.max_abs > 0 ? std::log2(site.max_abs) : 0.0},
                      {"elements", static_cast<double>(site.elements) / per}}
                     .dump()
              << std::endl;
  }
  std::cout << json{{"preset", "truncation-audit"},
                    {"row", "total"},
                    {"policy", policy},
                    {"phase", phase},
                    {"sites", audit.sites.size()},
                    {"expected_failures", audit.expected_failures() / per}}
                   .dump()
            << std::endl;
}

}  // namespace

int truncation_audit_main(int argc, char** argv) {
  CLI::App app{"mpcache-bench --preset truncation-audit: expected truncation failures per call site"};
  Settings s;
  std::string preset;
  add_held_out_run_options(app, preset, s, 2, "greedy tokens per prompt (the first comes with prefill)");
  app.add_option("--top", s.top, "call sites listed per policy and phase")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  try {
    check_policies<Plain>(s.policies, s.budget);
    const ModelConfig c = ModelConfig::from_json_file(s.model_dir + "/config.json");
    // The prompts private-fidelity uses.
    const auto prompts = held_out_prompts(s.text_path, c, s.prompts, s.prompt_bytes, s.tokens);
    Scheduler scheduler;
    Plain loader;
    const auto weights = sync_wait(scheduler, load_decoder(loader, c, weights_from_file(s.model_dir + "/model.safetensors")));
    for (const auto& policy : s.policies) {
      PhaseAudits audits;
      for (const auto& prompt : prompts)
        audit_prompt(scheduler, weights, policy, s.budget, prompt.tokens, s.tokens, audits);
      print_phase(policy, "prefill", *audits.prefill, static_cast<double>(s.prompts), s.top);
      print_phase(policy, "decode", *audits.decode, static_cast<double>(s.prompts * (s.tokens - 1)), s.top);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-bench truncation-audit: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace mpcache::bench
