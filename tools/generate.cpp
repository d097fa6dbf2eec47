// `mpcache generate` (see generate.hpp): flags in, text and costs out. The
// runs are mpcache-jobs' (src/jobs/generate_job.hpp); this file checks the
// options, reads the client's prompt and prints.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <unistd.h>
#include <nlohmann/json.hpp>
import mpcache.text;
import mpcache;
#include "cluster_config.hpp"
#include "generate.hpp"
#include "generation_check.hpp"
#include "generation_report.hpp"
#include "client_text.hpp"

namespace mpcache::tools {

using jobs::TextStream;
namespace {

using nlohmann::json;
using jobs::Generated;
using jobs::Prompt;

// Text (UTF-8) as a C-like string body: \n, \t, \", \\, other control
// characters as \xNN, everything else as it is.
std::string escaped(std::string_view text) {
  std::string s;
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b == '\n') s += "\\n";
    else if (b == '\t') s += "\\t";
    else if (b == '"' || b == '\\') s += '\\', s += c;
    else if (b < 32 || b == 127) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      s += hex;
    } else {
      s += c;
    }
  }
  return s;
}

// Where a cut at byte `at` of UTF-8 text keeps whole characters: at or after it.
std::size_t char_boundary(std::string_view s, std::size_t at) {
  while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
  return at;
}

double mb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// What the client sees on its terminal: a progress line on stderr during the
// prefill (only when stderr is a terminal) and one line per step on stdout,
// with the text the step's token adds.
class ClientConsole {
 public:
  explicit ClientConsole(const text::Tokenizer& tok) : tty_(::isatty(2) != 0), tok_(&tok), text_(tok) {}
  void progress(const PrefillProgress& p) {
    if (!tty_) return;
    std::fprintf(stderr, "\r\033[K  prefill: layer %zu/%zu done, %zu tokens, %.2f MB sent", p.layer + 1, p.layers,
                 p.tokens, mb(p.costs.payload_bytes_sent()));
    std::fflush(stderr);
  }
  // Prints the step; returns the text its token adds (at the client).
  std::string step(const GenerationStep& s) {
    if (tty_ && s.step == 0) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
    // A speculative step chose its accepted drafts and a correction.
    std::string piece;
    if (s.tokens.size() > 1)
      for (const std::uint32_t t : s.tokens) piece += text_.push(t);
    else if (s.token)
      piece = text_.push(*s.token);
    const std::string all = escaped(text_.text());
    const std::string tail = all.size() > 40 ? "..." + all.substr(char_boundary(all, all.size() - 37)) : all;
    // What the token adds to the text; an end of sequence adds none.
    const std::string shown = !s.token ? "\"?\""
                              : tok_->is_eos(*s.token) ? "(end of sequence)"
                                                       : "\"" + escaped(piece) + "\"";
    const std::string accepted =
        s.drafted > 0 ? " (" + std::to_string(s.accepted) + "/" + std::to_string(s.drafted) + " drafts)" : "";
    std::printf("  %-7s %4zu %9.3f s %10.3f MB %7llu rounds  +%s%s  %s\n", phase_name(s.phase), s.step, s.seconds,
                mb(s.costs.payload_bytes_sent()), static_cast<unsigned long long>(s.clock_after - s.clock_before),
                shown.c_str(), accepted.c_str(), tail.c_str());
    std::fflush(stdout);
    return piece;
  }
  // The whole text, once generation is over.
  std::string text() {
    (void)text_.finish();
    return text_.text();
  }
  static void columns() {
    std::printf("  %-7s %4s %11s %13s %14s  %s\n", "phase", "step", "latency", "client sent", "rounds", "token, text");
  }

 private:
  bool tty_;
  const text::Tokenizer* tok_;
  TextStream text_;
};

void print_check(const json& check) {
  std::printf("float64 check (debugging aid: this launcher sees both the prompt and the weights; "
              "a real cluster cannot check): %zu/%zu tokens are the float64 argmax, %zu/%zu within 0.05 "
              "(worst gap %.3g)\n",
              check["exact"].get<std::size_t>(), check["tokens"].get<std::size_t>(), check["near"].get<std::size_t>(),
              check["tokens"].get<std::size_t>(), check["worst_gap"].get<double>());
}

void print_summary(const json& s, const json& parties) {
  if (s.contains("prefill_latency_s"))
    std::printf("prefill: %.3f s, %.3f MB (busiest party), %llu rounds\n", s["prefill_latency_s"].get<double>(),
                mb(s["prefill_bytes_max_party"].get<std::uint64_t>()),
                static_cast<unsigned long long>(s["prefill_rounds"].get<std::uint64_t>()));
  if (s.contains("decode_steps") && !s.contains("drafted"))
    std::printf("per decoded token (mean of %zu): %.3f s, %.3f MB (busiest party), %.0f rounds\n",
                s["decode_steps"].get<std::size_t>(), s["decode_latency_s_mean"].get<double>(),
                s["decode_bytes_max_party_mean"].get<double>() / 1e6, s["decode_rounds_mean"].get<double>());
  if (s.contains("drafted"))
    std::printf("speculation: %zu decode steps chose %zu tokens (%zu of %zu drafts accepted); per token %.3f s, "
                "%.3f MB (busiest party), %.0f rounds; per step %.0f rounds\n",
                s["decode_steps"].get<std::size_t>(), s["decoded_tokens"].get<std::size_t>(),
                s["accepted"].get<std::size_t>(), s["drafted"].get<std::size_t>(),
                s["decode_latency_s_per_token"].get<double>(), s["decode_bytes_max_party_per_token"].get<double>() / 1e6,
                s["decode_rounds_per_token"].get<double>(), s["decode_rounds_mean"].get<double>());
  if (s.value("prefill_offline_bytes", 0.0) > 0)
    std::printf("offline (the dealer's correlations, sent ahead): prefill %.3f MB, %.3f MB per decoded token\n",
                mb(s["prefill_offline_bytes"].get<std::uint64_t>()), s.value("decode_offline_bytes_mean", 0.0) / 1e6);
  std::string rss;
  for (const auto& p : parties)
    if (p.contains("peak_rss_kb"))
      rss += (rss.empty() ? "" : ", ") + std::string("party ") + std::to_string(p["party"].get<int>()) + " " +
             std::to_string(p["peak_rss_kb"].get<long>() / 1024) + " MB";
  if (!rss.empty()) std::printf("peak RSS: %s\n", rss.c_str());
  std::string held;
  for (const auto& p : parties) {
    if (!p.contains("weight_bytes") || p.value("weights", std::size_t{0}) == 0) continue;
    const auto bytes = p["weight_bytes"].get<std::size_t>();
    char part[96];
    std::snprintf(part, sizeof part, "%sparty %d %.0f MB (%.2f bytes per weight)", held.empty() ? "" : ", ",
                  p["party"].get<int>(), mb(bytes), double(bytes) / double(p["weights"].get<std::size_t>()));
    held += part;
  }
  if (!held.empty()) std::printf("weights held: %s\n", held.c_str());
  for (const auto& p : parties) {
    if (!p.contains("kv_decoder_bytes")) continue;
    std::printf("KV cache at the end, party %d: decoder %.3f MB", p["party"].get<int>(),
                mb(p["kv_decoder_bytes"].get<std::uint64_t>()));
    if (p.contains("kv_policy_bytes")) std::printf(" + policy %.3f MB", mb(p["kv_policy_bytes"].get<std::uint64_t>()));
    else std::printf(" + policy (not counted)");
    std::printf(" resident, %.3f MB in its backing file\n", mb(p["kv_backing_bytes"].get<std::uint64_t>()));
  }
}

void print_header(const GenerateOptions& o, const std::string& where, const Prompt& prompt,
                  const text::Tokenizer& tok) {
  std::printf("mpcache generate: private greedy decoding under %s, %s\n",
              o.mode.protocol == "add2" ? "add2 (2 parties, party 2 deals)" : "rss3", where.c_str());
  std::printf("  model %s, policy %s", o.model_dir.c_str(), o.policy.c_str());
  if (o.policy != "full") std::printf(" (budget %zu tokens per KV head)", o.budget);
  std::printf(", %s truncation, %s comparisons, prefill memory budget %g MiB", o.mode.truncation.c_str(),
              o.mode.comparisons.front().c_str(),
              double(jobs::memory_budget_of(o)) / double(1 << 20));
  std::string shown = escaped(prompt.text);
  if (shown.size() > 160)
    shown = shown.substr(0, char_boundary(shown, 120)) + "..." + shown.substr(char_boundary(shown, shown.size() - 37));
  std::string size = std::to_string(prompt.text.size()) + " bytes";
  if (tok.name() != "bytes") size += ", " + std::to_string(prompt.ids.size()) + " tokens of " + tok.name();
  std::printf(", %zu new tokens", o.tokens);
  if (o.speculate > 0) std::printf(", speculating %zu tokens a step (drafter %s)", o.speculate, o.draft.c_str());
  if (!tok.eos_ids().empty() && !o.ignore_eos) std::printf(" at most (ends at EOS)");
  std::printf("\n  prompt (client, %s): \"%s\"\n", size.c_str(), shown.c_str());
  ClientConsole::columns();
  std::fflush(stdout);
}

// The client's words for the end of its text.
void print_text(const std::string& text, std::size_t generated, std::size_t budget, GenerationEnd end,
                const std::vector<std::uint32_t>& tokens) {
  std::printf("generated, learned by the client only: \"%s\"\n", escaped(text).c_str());
  if (end == GenerationEnd::eos)
    std::printf("stopped at end of sequence (token %u) after %zu of at most %zu tokens\n",
                tokens.empty() ? 0u : tokens.back(), generated, budget);
}

// The end of a launcher or in-process run: text, summary, check, JSON lines.
int finish(const GenerateOptions& o, const std::string& mode, const std::string& transport, const Prompt& prompt,
           const text::Tokenizer& tok, const Generated& out, const json& steps, json parties, bool ok,
           bool show_text) {
  const auto& tokens = out.tokens;
  json summary = jobs::generation_summary(o, mode, transport, prompt, tok, out, steps);
  if (ok) {
    if (show_text) print_text(out.text, out.count, o.tokens, out.end, tokens);
    print_summary(summary, parties);
    // All the budget, or fewer ending at a stop token, every party agreeing on how many.
    if (tokens.size() != out.count || (out.count != o.tokens && out.end != GenerationEnd::eos)) ok = false;
    // A stop token within a speculative step's accepted drafts ends the
    // client's text there; the other parties counted the step whole.
    for (const auto& p : parties) {
      const std::size_t counted = p.value("generated", out.count);
      if (o.speculate > 0 ? counted < out.count : counted != out.count) ok = false;
    }
  }
  if (ok && o.check) {
    summary["check"] = jobs::float64_check(o, prompt.ids, tokens);
    print_check(summary["check"]);
    ok = summary["check"]["ok"].get<bool>();
  }
  summary["ok"] = ok;
  std::vector<json> lines(steps.begin(), steps.end());
  lines.push_back(summary);
  for (auto& p : parties) {
    p["row"] = "party";
    lines.push_back(p);
  }
  jobs::write_json_lines(o.json, lines);
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

// The client's terminal as the jobs see it.
jobs::ClientView client_view(ClientConsole& console, std::function<void(const std::string&)> started) {
  return {.started = std::move(started),
          .progress = [&console](const PrefillProgress& p) { console.progress(p); },
          .step = [&console](const GenerationStep& s) { return console.step(s); },
          .text = [&console] { return console.text(); }};
}

int stopped(int signal, const char* how) {
  std::fprintf(stderr, "mpcache generate: stopped by signal %d%s\n", signal, how);
  return 128 + signal;
}

int run_in_process(const GenerateOptions& o, const Prompt& prompt, const text::Tokenizer& tok) {
  ClientConsole console(tok);
  const auto view = client_view(console, [&](const std::string& transport) {
    print_header(o, "3 parties in this process (" + transport + ")", prompt, tok);
  });
  const jobs::GenerateRun run = jobs::run_generate_in_process(o, prompt, tok, view);
  if (run.stopped_by != 0) return stopped(run.stopped_by, ": the parties cancelled the generation");
  return finish(o, "in-process", run.transport, prompt, tok, run.out, run.steps, run.parties, run.ok,
                /*show_text=*/true);
}

// One party of a cluster (a process). `prompt` and `tok`: at the client
// (party 0) only.
int run_cluster_party(const GenerateOptions& o, const Prompt* prompt, const text::Tokenizer* tok) {
  std::optional<ClientConsole> console;
  jobs::ClientView view;
  if (tok) {
    console.emplace(*tok);
    view = client_view(*console, [&](const std::string& transport) {
      print_header(o, "party 0 (client) of " + o.config + ", " + transport + ", link " + o.network.link, *prompt,
                   *tok);
    });
  }
  const jobs::GeneratePartyRun run = jobs::run_generate_party(o, prompt, tok, view);
  if (run.exit_code != 0) {
    std::fflush(stdout);
    std::fprintf(stderr, "mpcache generate: party %d: %s\n", o.id, run.error.c_str());
    return run.exit_code;
  }
  const GenerationResult& r = run.result;
  if (console)
    print_text(run.text, r.generated, r.new_tokens, r.end, r.tokens);
  else
    std::printf("mpcache generate: party %d (%s) done: %zu tokens generated (%s), learned none of them\n", o.id,
                jobs::generate_role(PartyId(o.id), o.mode.protocol), r.generated, end_name(r.end));
  return 0;
}

// Three party processes on loopback, fresh keys; the client's stdout is ours.
int run_launcher(const GenerateOptions& o, const Prompt& prompt, const text::Tokenizer& tok, const std::string& self) {
  const jobs::GenerateRun run = jobs::launch_generate_parties(o, prompt, self, [&] {
    std::printf("mpcache generate: 3 party processes on this host (loopback TCP, %s, fresh keys), link %s\n",
                o.network.insecure ? "plain, --insecure" : "AES-GCM", o.network.link.c_str());
    std::fflush(stdout);
  });
  for (const auto& p : run.parties)
    if (!p.value("ok", false) || p.value("exit_status", -1) != 0)
      std::fprintf(stderr, "mpcache generate: party %d failed: %s\n", p["party"].get<int>(),
                   p.value("error", "exit status " + std::to_string(p.value("exit_status", -1))).c_str());
  if (run.killed_late) std::fprintf(stderr, "mpcache generate: parties still running after the limit were killed\n");
  if (run.stopped_by != 0)
    return stopped(run.stopped_by, run.killed_late ? "; the parties cancelled the generation (those still running "
                                                     "after the grace period were killed)"
                                                   : "; the parties cancelled the generation");
  if (run.ok) std::printf("transport %s\n", run.transport.c_str());
  return finish(o, "3 processes", run.transport, prompt, tok, run.out, run.steps, run.parties, run.ok,
                /*show_text=*/false);  // the client process printed it
}

}  // namespace

int run_generate(const GenerateOptions& o_in, const std::string& self) {
  GenerateOptions o = o_in;
  const bool party_mode = !o.config.empty();
  if (party_mode && o.id < 0) throw Error(ErrorCode::invalid_argument, "--config needs --id (this party's index)");
  if (!party_mode && o.id >= 0) throw Error(ErrorCode::invalid_argument, "--id needs --config (the cluster to join)");
  if (party_mode && o.in_process) throw Error(ErrorCode::invalid_argument, "--in-process and --config exclude each other");
  if (party_mode && o.check)
    throw Error(ErrorCode::invalid_argument,
                "--check needs the prompt and the weights in one launcher (--in-process or the local launcher); "
                "in a cluster no party can check");
  if (o.in_process && !o.fault.empty()) throw Error(ErrorCode::invalid_argument, "--fault needs party processes");
  if (party_mode && !o.fault.empty() && o.fault != "exit")
    throw Error(ErrorCode::invalid_argument, "--fault in a party: 'exit' (dies after decode step 1)");
  if (o.in_process && o.network.insecure) throw Error(ErrorCode::invalid_argument, "--insecure is for TCP parties");
  const ModelConfig c = jobs::check_generate_options(o);

  // The prompt and the tokenizer: the client's (party 0 in a cluster; the
  // launcher otherwise). The other parties read neither.
  const bool has_prompt = !party_mode || o.id == static_cast<int>(jobs::generate_client);
  Prompt prompt;
  std::unique_ptr<text::Tokenizer> tok;
  if (has_prompt) tok = jobs::client_prompt(o, c, prompt);
  if (party_mode) return run_cluster_party(o, has_prompt ? &prompt : nullptr, tok.get());
  if (o.in_process) return run_in_process(o, prompt, *tok);
  return run_launcher(o, prompt, *tok, self);
}

}  // namespace mpcache::tools
