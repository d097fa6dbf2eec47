// mpcache-bench --preset fidelity: model quality under each KV-cache policy
// and budget, in float64 clear text (the Ref backend), on our Austen model
// and the held-out novel. One JSON object per line:
//   {"policy","budget","context","metric","value","samples"}
// metrics:
//   ppl          per-byte perplexity of the last --decode bytes of windows of
//                `context` bytes; the rest is prefilled with full attention,
//                the measured bytes are decoded one by one under the policy
//   passkey_acc  exact match of the 5 key digits, greedy; the prompt
//                (filler + needle at a stratified depth + question) is
//                prefilled, the answer decoded under the policy (the first
//                digit comes from the prefill, as in SnapKV/LongBench setups)
//   recall       ArkVale's |selected ∩ true top-n| / n per step, layer, head,
//                n = tokens selected, true top-n by full attention
//   mass         share of full attention mass on the selected tokens
//   pick_overlap (MPCache arms without layer sharing) |picks of layer a ∩
//                picks of layer b| / k per layer pair a < b ("pick_overlap_l0_2"),
//                k = fine clusters picked per step, per KV head and step: which
//                layers could share a pick (MpCacheOptions::share_pairs)
//   commonality  (policy "full") |top-k of layer l ∩ top-k of layer l+1| / k,
//                k = budget tokens, per adjacent pair ("commonality_l0_1") and mean
//   estimator_recall
//                (policy "full", ArkVale's estimation accuracy, page_estimators.hpp)
//                top-k recall of each page-importance estimator against the
//                true page importance (max over the page of q . k), per page
//                size, k and layer ("layer": -1 is the mean over layers), over
//                every query head of every decode step; extra fields
//                "estimator", "page", "k", "layer"
// Budgets are fractions of the context; a policy gets max(budget*context, 8)
// tokens per KV head per layer.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "fidelity_common.hpp"
#include "page_estimators.hpp"

namespace mpcache::bench {
namespace {

using P = Ref;
using Share = Ref::Share;

struct Settings {
  std::string model_dir;
  std::string text_path;
  std::vector<std::size_t> contexts{1024, 2048};
  std::vector<double> budgets{0.05, 0.10, 0.20};
  std::vector<std::string> policies{"streaming_llm", "h2o", "tova", "snapkv", "infllm", "longcache", "quest", "mpcache"};
  std::size_t windows = 8;
  std::size_t decode = 128;
  std::size_t passkeys = 100;
  std::uint64_t seed = 1234;
  std::string passkey_format = "marker";  // as tools/train/train.py --passkey-format
  std::vector<std::size_t> estimator_pages{16, 32};  // ArkVale's page sizes
  std::vector<std::size_t> estimator_ks{1, 5, 10};
};

template <class T>
T run(Task<T> task) {
  Scheduler scheduler;
  return sync_wait(scheduler, std::move(task));
}

struct Arm {  // one (policy, budget)
  std::string policy;
  double budget = 0;
  std::size_t tokens = 0;
  double nll = 0;
  std::size_t predictions = 0;
  std::size_t passkey_hits = 0, passkey_trials = 0;
  double recall = 0, mass = 0;
  std::size_t recall_n = 0;
  // MPCache without sharing: the step's picked fine clusters per
  // [layer * 64 + KV head], and the overlap sums per layer pair.
  std::size_t cluster = 0, picks = 0;  // 0: not measured
  std::vector<std::vector<std::size_t>> picked{};
  std::map<std::pair<std::size_t, std::size_t>, double> overlap{};
  std::size_t overlap_n = 0;
};

// An MPCache arm without layer sharing measures the overlap of its layers' picks.
void plan_pick_overlap(Arm& arm) {
  const auto o = mpcache_variant(arm.policy);
  if (!o || o->share_layers || !o->share_pairs.empty()) return;
  arm.cluster = o->cluster;
  arm.picks = (arm.tokens - 2 * o->cluster) / o->cluster;
  arm.picked.assign(64 * 64, {});
}

// The picked fine clusters of a selection's positions: after the first
// cluster's, the next picks * cluster positions (the tail comes last).
void note_picks(Arm& arm, std::size_t layer, std::size_t head, std::vector<std::size_t> positions) {
  std::sort(positions.begin(), positions.end());
  auto& out = arm.picked.at(layer * 64 + head);
  out.clear();
  if (positions.size() < (arm.picks + 1) * arm.cluster) return;
  for (std::size_t i = arm.cluster; i < (arm.picks + 1) * arm.cluster; i += arm.cluster)
    out.push_back(positions[i] / arm.cluster);
}

void add_pick_overlap(Arm& arm, std::size_t layers, std::size_t heads) {
  if (arm.picks == 0) return;
  for (std::size_t a = 0; a < layers; ++a)
    for (std::size_t b = a + 1; b < layers; ++b) {
      double acc = 0;
      for (std::size_t h = 0; h < heads; ++h) {
        const auto& x = arm.picked[a * 64 + h];
        const auto& y = arm.picked[b * 64 + h];
        std::size_t hit = 0;
        for (auto c : y) hit += std::count(x.begin(), x.end(), c);
        acc += double(hit) / double(arm.picks);
      }
      arm.overlap[{a, b}] += acc / double(heads);
    }
  ++arm.overlap_n;
}

struct Commonality {  // full cache: per adjacent layer pair, per budget
  std::vector<std::vector<double>> sum;  // [budget][pair]
  std::size_t n = 0;
};

std::vector<double> real_row(P& p, const Share& s) {
  auto r = p.to_real(s);
  return std::vector<double>(r.begin(), r.end());
}

double log_prob(const std::vector<double>& logits, std::size_t target) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (double v : logits) z += std::exp(v - m);
  return logits[target] - m - std::log(z);
}

// Installs a probe accumulating recall/mass into `arm` (and, for the full
// cache, the top-k sets per layer for commonality and the page estimators'
// accuracy).
void install_probe(Decoder<P>& decoder, P& p, Arm& arm,
                   std::vector<std::vector<std::vector<std::size_t>>>* full_topk, const std::vector<std::size_t>* ks,
                   EstimatorAccuracy* estimators) {
  decoder.set_probe([&decoder, &p, &arm, full_topk, ks, estimators](std::size_t layer, std::size_t head,
                                                                    const Share& queries, const Share& probs,
                                                                    const Share& positions) {
    if (estimators) {
      const auto q = p.to_real(queries);  // (g, d)
      const auto k = p.to_real(decoder.cache().at(layer).at(head).keys);  // (T, d)
      const KeyRows keys{k.data(), k.shape()[0], k.shape()[1]};
      estimators->observe(layer, q.data(), q.shape()[0], keys);
      // The study's inputs are attention's: q . k peaks where attention does.
      const auto pr = p.to_real(probs);
      for (std::size_t h = 0; h < q.shape()[0]; ++h) {
        std::vector<double> dots(keys.rows), weights(keys.rows);
        for (std::size_t t = 0; t < keys.rows; ++t) {
          dots[t] = true_importance(q.data() + h * keys.dim, keys, t, t + 1);
          weights[t] = pr(h, t);
        }
        estimators->check_inputs(top_pages(dots, 1) == top_pages(weights, 1));
      }
    }
    auto pr = p.to_real(probs);  // (g, T)
    const std::size_t g = pr.shape()[0], t = pr.shape()[1];
    std::vector<double> w(t, 0.0);
    for (std::size_t h = 0; h < g; ++h)
      for (std::size_t c = 0; c < t; ++c) w[c] += pr(h, c) / double(g);
    std::vector<std::size_t> sel;
    for (double v : p.to_real(positions))  // integers, not fixed-point: undo to_real's scale
      sel.push_back(static_cast<std::size_t>(std::llround(std::ldexp(v, p.frac_bits()))));
    const auto top = top_pages(w, sel.size());
    std::set<std::size_t> chosen(sel.begin(), sel.end());
    std::size_t hit = 0;
    for (auto x : top) hit += chosen.count(x);
    double mass = 0;
    for (auto x : chosen) mass += w.at(x);
    if (arm.picks) note_picks(arm, layer, head, sel);
    arm.recall += double(hit) / double(sel.size());
    arm.mass += mass;
    ++arm.recall_n;
    if (full_topk) {
      for (std::size_t b = 0; b < ks->size(); ++b) (*full_topk)[b][layer * 64 + head] = top_pages(w, (*ks)[b]);
    }
  });
}

class Study {
 public:
  Study(const Settings& s, DecoderWeights<P>& weights, std::string text)
      : s_(s), weights_(weights), text_(std::move(text)), rng_(s.seed) {}

  void run_context(std::size_t context) {
    const ModelConfig& c = weights_.config;
    if (context > c.max_positions) throw Error(ErrorCode::invalid_argument, "context exceeds the model's positions");
    std::vector<Arm> arms;
    arms.push_back({"full", 1.0, context});
    for (double b : s_.budgets)
      for (const auto& name : s_.policies) {
        const std::size_t tokens = kv::budget_tokens(b, context);
        if (make_policy<P>(name, tokens)) arms.push_back({name, b, tokens});
      }
    for (auto& a : arms) plan_pick_overlap(a);
    std::vector<std::size_t> ks;
    for (double b : s_.budgets) ks.push_back(kv::budget_tokens(b, context));
    Commonality common;
    common.sum.assign(ks.size(), std::vector<double>(c.num_layers - 1, 0.0));
    EstimatorAccuracy estimators(s_.estimator_pages, s_.estimator_ks, c.num_layers);

    // Perplexity windows, evenly spread over the text.
    const std::size_t span = text_.size() - context - 1;
    for (std::size_t wi = 0; wi < s_.windows; ++wi) {
      const std::size_t start = span * (2 * wi + 1) / (2 * s_.windows);
      std::vector<std::uint32_t> tokens(context);
      for (std::size_t i = 0; i < context; ++i) tokens[i] = static_cast<unsigned char>(text_[start + i]);
      const std::size_t prefix = context - s_.decode;
      evaluate(arms, ks, common, estimators, tokens, prefix, /*answer=*/0);
    }
    // Passkeys at stratified depths.
    std::uniform_int_distribution<int> key_dist(10000, 99999);
    for (std::size_t i = 0; i < s_.passkeys; ++i) {
      const double depth = (double(i) + 0.5) / double(s_.passkeys);
      const int key = key_dist(rng_);
      auto tokens = passkey_prompt(context, depth, key);
      evaluate(arms, ks, common, estimators, tokens, context - 5, /*answer=*/5);
    }
    for (const auto& a : arms) {
      emit(a.policy, a.budget, context, "ppl", a.predictions ? std::exp(a.nll / double(a.predictions)) : NAN, a.predictions);
      emit(a.policy, a.budget, context, "passkey_acc",
           a.passkey_trials ? double(a.passkey_hits) / double(a.passkey_trials) : NAN, a.passkey_trials);
      emit(a.policy, a.budget, context, "recall", a.recall_n ? a.recall / double(a.recall_n) : NAN, a.recall_n);
      emit(a.policy, a.budget, context, "mass", a.recall_n ? a.mass / double(a.recall_n) : NAN, a.recall_n);
      for (const auto& [pair, sum] : a.overlap)
        emit(a.policy, a.budget, context, "pick_overlap_l" + std::to_string(pair.first) + "_" + std::to_string(pair.second),
             sum / double(a.overlap_n), a.overlap_n);
    }
    for (std::size_t b = 0; b < ks.size(); ++b) {
      double mean = 0;
      for (std::size_t l = 0; l + 1 < c.num_layers; ++l) {
        const double v = common.n ? common.sum[b][l] / double(common.n) : NAN;
        mean += v;
        emit("full", s_.budgets[b], context, "commonality_l" + std::to_string(l) + "_" + std::to_string(l + 1), v, common.n);
      }
      emit("full", s_.budgets[b], context, "commonality", mean / double(c.num_layers - 1), common.n);
    }
    emit_estimators(estimators, context);
    emit("full", 1.0, context, "estimator_inputs_match", estimators.inputs_match(), estimators.inputs_checked());
  }

 private:
  std::vector<std::uint32_t> passkey_prompt(std::size_t total, double depth, int key) {
    const std::string k = std::to_string(key);
    const bool marker = s_.passkey_format == "marker";
    const std::string needle = marker ? "The pass key is #" + k + ". Remember it. "
                                      : "The pass key is " + k + ". Remember it. " + k + " is the pass key. ";
    const std::string question = (marker ? "\nWhat is the pass key? The pass key is #" : "\nWhat is the pass key? The pass key is ") + k;
    const std::size_t filler_len = total - needle.size() - question.size();
    std::uniform_int_distribution<std::size_t> at(0, text_.size() - filler_len - 2);
    const std::string filler = text_.substr(at(rng_), filler_len);
    std::size_t pos = static_cast<std::size_t>(std::llround(depth * double(filler_len)));
    while (pos > 0 && pos < filler_len && filler[pos - 1] != ' ' && filler[pos - 1] != '\n') ++pos;
    const std::string seq = filler.substr(0, pos) + needle + filler.substr(pos) + question;
    std::vector<std::uint32_t> out;
    for (unsigned char ch : seq) out.push_back(ch);
    return out;
  }

  // Prefill tokens[0, prefix) once for every arm, then per arm decode the
  // rest: teacher-forced NLL (answer == 0) or greedy passkey digits.
  void evaluate(std::vector<Arm>& arms, const std::vector<std::size_t>& ks, Commonality& common,
                EstimatorAccuracy& estimators, const std::vector<std::uint32_t>& tokens, std::size_t prefix,
                std::size_t answer) {
    P p;
    Decoder<P> base(weights_);
    std::vector<kv::AnyPolicy<P>> policies;
    for (const auto& a : arms) policies.push_back(*make_policy<P>(a.policy, a.tokens));
    kv::Tee<P> tee(&policies);
    std::vector<std::uint32_t> head(tokens.begin(), tokens.begin() + std::ptrdiff_t(prefix));
    auto prefill_logits = p.to_real(run(base.prefill(p, tee, 0, head, prefix)));
    std::vector<double> first(prefill_logits.shape()[1]);
    for (std::size_t v = 0; v < first.size(); ++v) first[v] = prefill_logits(prefix - 1, v);
    const std::size_t layers = weights_.config.num_layers;
    for (std::size_t ai = 0; ai < arms.size(); ++ai) {
      Arm& arm = arms[ai];
      Decoder<P> decoder = base;
      const bool full = arm.policy == "full";
      std::vector<std::vector<std::vector<std::size_t>>> topk(ks.size(), std::vector<std::vector<std::size_t>>(layers * 64));
      // The probe attends over the decoder's whole cache, which a policy
      // that keeps its own (MPCache, arkvale-recall) would let the decoder
      // drop: probed, the decoder keeps it. arkvale-recall's selections are
      // arkvale's: no recall or mass rows of its own.
      if (arm.policy != "arkvale-recall")
        install_probe(decoder, p, arm, full ? &topk : nullptr, &ks, full ? &estimators : nullptr);
      auto after_step = [&] {
        add_pick_overlap(arm, layers, weights_.config.num_kv_heads);
        if (!full) return;
        for (std::size_t b = 0; b < ks.size(); ++b)
          for (std::size_t l = 0; l + 1 < layers; ++l) {
            double acc = 0;
            const std::size_t heads = weights_.config.num_kv_heads;
            for (std::size_t h = 0; h < heads; ++h) {
              const auto& a = topk[b][l * 64 + h];
              const auto& bb = topk[b][(l + 1) * 64 + h];
              std::set<std::size_t> sa(a.begin(), a.end());
              std::size_t hit = 0;
              for (auto x : bb) hit += sa.count(x);
              acc += double(hit) / double(std::max<std::size_t>(1, a.size()));
            }
            common.sum[b][l] += acc / double(heads);
          }
        ++common.n;
      };
      if (answer == 0) {
        // Teacher-forced: token t is fed, the logits predict t + 1.
        for (std::size_t t = prefix; t + 1 < tokens.size(); ++t) {
          auto logits = real_row(p, run(decoder.decode(p, policies[ai], 0, tokens[t])));
          arm.nll -= log_prob(logits, tokens[t + 1]);
          ++arm.predictions;
          after_step();
        }
      } else {
        std::vector<double> logits = first;
        bool ok = true;
        for (std::size_t d = 0; d < answer; ++d) {
          const auto guess = static_cast<std::uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
          ok = ok && guess == tokens[prefix + d];
          if (d + 1 < answer) {
            logits = real_row(p, run(decoder.decode(p, policies[ai], 0, guess)));
            after_step();
          }
        }
        arm.passkey_hits += ok ? 1 : 0;
        ++arm.passkey_trials;
      }
    }
  }

  void emit(const std::string& policy, double budget, std::size_t context, const std::string& metric, double value,
            std::size_t samples) {
    nlohmann::json j = {{"preset", "fidelity"}, {"policy", policy}, {"budget", budget}, {"context", context},
                        {"metric", metric},     {"value", value},   {"samples", samples}};
    std::cout << j.dump() << std::endl;
  }

  // Per estimator, page size and k: one row per layer and their mean
  // (layer -1; the mean of the layers' means).
  void emit_estimators(const EstimatorAccuracy& acc, std::size_t context) {
    for (std::size_t pi = 0; pi < acc.page_sizes().size(); ++pi)
      for (std::size_t ki = 0; ki < acc.ks().size(); ++ki)
        for (std::size_t ei = 0; ei < all_page_estimators.size(); ++ei) {
          double mean = 0;
          std::size_t samples = 0, layers = 0;
          auto row = [&](long layer, double value, std::size_t n) {
            nlohmann::json j = {{"preset", "fidelity"},
                                {"policy", "full"},
                                {"budget", 1.0},
                                {"context", context},
                                {"metric", "estimator_recall"},
                                {"estimator", estimator_name(all_page_estimators[ei])},
                                {"page", acc.page_sizes()[pi]},
                                {"k", acc.ks()[ki]},
                                {"layer", layer},
                                {"value", value},
                                {"samples", n}};
            std::cout << j.dump() << std::endl;
          };
          for (std::size_t l = 0; l < acc.layers(); ++l) {
            const std::size_t n = acc.samples(pi, ki, l, ei);
            if (n == 0) continue;
            const double v = acc.recall(pi, ki, l, ei);
            row(static_cast<long>(l), v, n);
            mean += v;
            samples += n;
            ++layers;
          }
          if (layers > 0) row(-1, mean / double(layers), samples);
        }
  }

  const Settings& s_;
  DecoderWeights<P>& weights_;
  std::string text_;
  std::mt19937_64 rng_;
};

}  // namespace

int fidelity_main(int argc, char** argv) {
  CLI::App app{"mpcache-bench --preset fidelity: perplexity, passkey, recall per KV policy and budget (float64)"};
  Settings s;
  std::string preset;
  add_model_and_text_options(app, preset, s.model_dir, s.text_path, "held-out text (bytes)");
  app.add_option("--contexts", s.contexts, "context lengths")->delimiter(',');
  app.add_option("--budgets", s.budgets, "budgets as fractions of the context")->delimiter(',');
  app.add_option("--policies", s.policies, "policies besides full")->delimiter(',');
  app.add_option("--windows", s.windows, "perplexity windows per context");
  app.add_option("--decode", s.decode, "bytes decoded (and scored) per window");
  app.add_option("--passkeys", s.passkeys, "passkey trials per context");
  app.add_option("--seed", s.seed, "passkey seed");
  app.add_option("--estimator-pages", s.estimator_pages, "page sizes of the page-estimator accuracy study")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--estimator-ks", s.estimator_ks, "k of its top-k recall")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--passkey-format", s.passkey_format, "needle format the model was trained on")
      ->check(CLI::IsMember({"marker", "plain"}));
  bool json = true;
  app.add_flag("--json", json, "(rows are always JSON lines)");
  CLI11_PARSE(app, argc, argv);
  try {
    // Names and numbers first: a typo fails at once, before any file is read.
    for (const auto& name : s.policies) check_policy_name(name);
    for (double b : s.budgets)
      if (!(b > 0 && b <= 1)) throw Error(ErrorCode::invalid_argument, "budget " + std::to_string(b) + " is not a fraction in (0, 1]");
    const std::string text = read_text(s.text_path);
    const ModelConfig c = ModelConfig::from_json_file(s.model_dir + "/config.json");
    P p;
    auto weights = run(load_decoder(p, c, weights_from_file(s.model_dir + "/model.safetensors")));
    for (auto ctx : s.contexts) {
      if (ctx <= s.decode + 1 || ctx + 2 >= text.size())
        throw Error(ErrorCode::invalid_argument, "context " + std::to_string(ctx) + " does not fit --decode or the text");
      Study study(s, weights, text);
      study.run_context(ctx);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-bench fidelity: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace mpcache::bench
