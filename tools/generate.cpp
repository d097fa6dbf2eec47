// `mpcache generate` (see generate.hpp): flags in, text and costs out. The
// generation itself is mpcache::generate_party (modules/model/generate.cppm).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/resource.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
import mpcache.text;
import mpcache;
#include "cluster_config.hpp"
#include "cluster_connect.hpp"
#include "generate.hpp"
#include "local_cluster.hpp"
#include "stop_on_signal.hpp"
#include "client_text.hpp"

namespace mpcache::tools {
namespace {

using nlohmann::json;
constexpr PartyId client_id = 0;  // gives the prompt, alone learns the text
constexpr PartyId owner_id = 1;   // alone reads the weights file

const char* role(PartyId id, const std::string& protocol) {
  return id == client_id ? "client" : id == owner_id ? "model owner" : protocol == "add2" ? "dealer" : "helper";
}

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

long peak_rss_kb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // kilobytes on Linux
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
    const std::string piece = s.token ? text_.push(*s.token) : std::string();
    const std::string all = escaped(text_.text());
    const std::string tail = all.size() > 40 ? "..." + all.substr(char_boundary(all, all.size() - 37)) : all;
    // What the token adds to the text; an end of sequence adds none.
    const std::string shown = !s.token ? "\"?\""
                              : tok_->is_eos(*s.token) ? "(end of sequence)"
                                                       : "\"" + escaped(piece) + "\"";
    std::printf("  %-7s %4zu %9.3f s %10.3f MB %7llu rounds  +%s  %s\n", phase_name(s.phase), s.step, s.seconds,
                mb(s.costs.payload_bytes_sent()), static_cast<unsigned long long>(s.clock_after - s.clock_before),
                shown.c_str(), tail.c_str());
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

json step_row(const GenerationStep& s, PartyId id) {
  json row = {{"row", "step"},
              {"party", id},
              {"phase", phase_name(s.phase)},
              {"step", s.step},
              {"latency_s", s.seconds},
              {"bytes_sent", s.costs.payload_bytes_sent()},
              {"rounds", s.clock_after - s.clock_before},
              {"clock_before", s.clock_before},
              {"clock_after", s.clock_after}};
  if (s.token) row["token"] = *s.token;
  return row;
}

// Steps across parties: latency of the slowest party, bytes of the busiest,
// rounds on the critical path (parties' Lamport clocks differ: compare the
// highest ones before and after). Under add2 the dealer's step is offline
// work: its bytes are reported apart and it counts for none of the rest.
json merge_steps(const std::array<std::vector<json>, 3>& rows, const std::string& protocol) {
  json out = json::array();
  const std::size_t steps = std::min({rows[0].size(), rows[1].size(), rows[2].size()});
  const bool dealt = protocol == "add2";
  for (std::size_t k = 0; k < steps; ++k) {
    double latency = 0;
    std::uint64_t bytes_max = 0, bytes_total = 0;
    CriticalPath path;
    for (std::size_t i = 0; i < (dealt ? 2 : 3); ++i) {
      const json& r = rows[i][k];
      latency = std::max(latency, r.at("latency_s").get<double>());
      bytes_max = std::max(bytes_max, r.at("bytes_sent").get<std::uint64_t>());
      bytes_total += r.at("bytes_sent").get<std::uint64_t>();
      path.add(r.at("clock_before").get<std::uint64_t>(), r.at("clock_after").get<std::uint64_t>());
    }
    out.push_back({{"row", "step"},
                   {"phase", rows[0][k].at("phase")},
                   {"step", k},
                   {"latency_s", latency},
                   {"bytes_max_party", bytes_max},
                   {"bytes_total", bytes_total},
                   {"offline_bytes", dealt ? rows[2][k].at("bytes_sent").get<std::uint64_t>() : 0},
                   {"rounds", path.rounds()}});
  }
  return out;
}

UnusedTensors unused_weights(const GenerateOptions& o) {
  return o.allow_unused_weights ? UnusedTensors::allow : UnusedTensors::reject;
}

// The float64 reference check, a debugging aid for a launcher that sees both
// the prompt and the weights: the Ref logits after the prompt and the chosen
// tokens (teacher-forced, same policy); each chosen token should be their
// argmax (exact) or within 0.05 of it (a near-tie may flip under fixed point).
json float64_check(const GenerateOptions& o, const std::vector<std::uint32_t>& prompt,
                   const std::vector<std::uint32_t>& chosen) {
  const ModelConfig c = ModelConfig::from_json_file(o.model_dir + "/config.json");
  Scheduler scheduler;
  Ref p;
  auto weights = sync_wait(scheduler, load_decoder(p, c, weights_from_file(o.model_dir + "/model.safetensors", unused_weights(o))));
  Decoder<Ref> decoder(weights);
  auto policy = kv::make_policy<Ref>(o.policy, o.budget);
  const auto steps = sync_wait(scheduler, teacher_forced_logits(p, decoder, policy, prompt, chosen));
  std::size_t exact = 0, near = 0;
  double worst_gap = 0;
  std::vector<std::uint32_t> argmaxes;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const auto& last = steps[i];
    const auto best = static_cast<std::uint32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    argmaxes.push_back(best);
    const double gap = last[best] - last[chosen[i]];
    worst_gap = std::max(worst_gap, gap);
    exact += chosen[i] == best ? 1 : 0;
    near += gap <= 0.05 ? 1 : 0;
  }
  return {{"exact", exact}, {"near", near}, {"tokens", chosen.size()}, {"worst_gap", worst_gap},
          {"float64_argmax", argmaxes}, {"ok", near == chosen.size()}};
}

void print_check(const json& check) {
  std::printf("float64 check (debugging aid: this launcher sees both the prompt and the weights; "
              "a real cluster cannot check): %zu/%zu tokens are the float64 argmax, %zu/%zu within 0.05 "
              "(worst gap %.3g)\n",
              check["exact"].get<std::size_t>(), check["tokens"].get<std::size_t>(), check["near"].get<std::size_t>(),
              check["tokens"].get<std::size_t>(), check["worst_gap"].get<double>());
}

// Summary of merged step rows: the prefill, and decode steps on average.
json summarize(const json& steps) {
  json s = json::object();
  double decode_s = 0, decode_bytes = 0, decode_rounds = 0, decode_offline = 0;
  std::size_t decodes = 0;
  for (const auto& r : steps) {
    if (r["phase"] == "prefill") {
      s["prefill_latency_s"] = r["latency_s"];
      s["prefill_bytes_max_party"] = r["bytes_max_party"];
      s["prefill_rounds"] = r["rounds"];
      s["prefill_offline_bytes"] = r["offline_bytes"];
    } else {
      decode_offline += r["offline_bytes"].get<double>();
      decode_s += r["latency_s"].get<double>();
      decode_bytes += r["bytes_max_party"].get<double>();
      decode_rounds += r["rounds"].get<double>();
      ++decodes;
    }
  }
  if (decodes > 0) {
    s["decode_steps"] = decodes;
    s["decode_latency_s_mean"] = decode_s / double(decodes);
    s["decode_bytes_max_party_mean"] = decode_bytes / double(decodes);
    s["decode_rounds_mean"] = decode_rounds / double(decodes);
    s["decode_offline_bytes_mean"] = decode_offline / double(decodes);
  }
  return s;
}

void print_summary(const json& s, const json& parties) {
  if (s.contains("prefill_latency_s"))
    std::printf("prefill: %.3f s, %.3f MB (busiest party), %llu rounds\n", s["prefill_latency_s"].get<double>(),
                mb(s["prefill_bytes_max_party"].get<std::uint64_t>()),
                static_cast<unsigned long long>(s["prefill_rounds"].get<std::uint64_t>()));
  if (s.contains("decode_steps"))
    std::printf("per decoded token (mean of %zu): %.3f s, %.3f MB (busiest party), %.0f rounds\n",
                s["decode_steps"].get<std::size_t>(), s["decode_latency_s_mean"].get<double>(),
                s["decode_bytes_max_party_mean"].get<double>() / 1e6, s["decode_rounds_mean"].get<double>());
  if (s.value("prefill_offline_bytes", 0.0) > 0)
    std::printf("offline (the dealer's correlations, sent ahead): prefill %.3f MB, %.3f MB per decoded token\n",
                mb(s["prefill_offline_bytes"].get<std::uint64_t>()), s.value("decode_offline_bytes_mean", 0.0) / 1e6);
  std::string rss;
  for (const auto& p : parties)
    if (p.contains("peak_rss_kb"))
      rss += (rss.empty() ? "" : ", ") + std::string("party ") + std::to_string(p["party"].get<int>()) + " " +
             std::to_string(p["peak_rss_kb"].get<long>() / 1024) + " MB";
  if (!rss.empty()) std::printf("peak RSS: %s\n", rss.c_str());
  for (const auto& p : parties) {
    if (!p.contains("kv_decoder_bytes")) continue;
    std::printf("KV cache at the end, party %d: decoder %.3f MB", p["party"].get<int>(),
                mb(p["kv_decoder_bytes"].get<std::uint64_t>()));
    if (p.contains("kv_policy_bytes")) std::printf(" + policy %.3f MB", mb(p["kv_policy_bytes"].get<std::uint64_t>()));
    else std::printf(" + policy (not counted)");
    std::printf(" resident, %.3f MB in its backing file\n", mb(p["kv_backing_bytes"].get<std::uint64_t>()));
  }
}

void add_kv_memory(json& party, const GenerationResult& result) {
  party["kv_decoder_bytes"] = result.kv_decoder_bytes;
  if (result.kv_policy_bytes) party["kv_policy_bytes"] = *result.kv_policy_bytes;
  party["kv_backing_bytes"] = result.kv_backing_bytes;
}

void write_json_lines(const std::string& path, const std::vector<json>& lines) {
  if (path.empty()) return;
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  jobs::write_text_file(path, text, false);
}

// --memory-budget in bytes (none given: the library's default).
std::size_t memory_budget_of(const GenerateOptions& o) {
  return o.memory_budget.empty() ? default_prefill_memory_budget : parse_memory_size(o.memory_budget);
}

// `tok`: the client's tokenizer, at the client only (its EOS ids end the
// generation unless --ignore-eos).

GenerationJob job_for(const GenerateOptions& o, PartyId id, const std::vector<std::uint32_t>* prompt,
                      const text::Tokenizer* tok, ComputePool* pool) {
  GenerationJob job;
  job.model_dir = o.model_dir;
  job.client = client_id;
  job.owner = owner_id;
  if (id == client_id && prompt) job.prompt = *prompt;
  if (id == client_id && tok && !o.ignore_eos) job.stop_tokens = tok->eos_ids();
  job.new_tokens = o.tokens;
  job.policy = o.policy;
  job.budget = o.budget;
  job.memory_budget = memory_budget_of(o);
  job.unused_weights = unused_weights(o);
  job.mode = o.mode.mode();
  job.rss3.compact_weights = o.compact_weights;
  job.rss3.pool = job.add2.pool = pool;
  return job;
}

// The client's prompt: its text, and its token ids.
struct Prompt {
  std::string text;
  std::vector<std::uint32_t> ids;
};

void print_header(const GenerateOptions& o, const std::string& where, const Prompt& prompt,
                  const text::Tokenizer& tok) {
  std::printf("mpcache generate: private greedy decoding under %s, %s\n",
              o.mode.protocol == "add2" ? "add2 (2 parties, party 2 deals)" : "rss3", where.c_str());
  std::printf("  model %s, policy %s", o.model_dir.c_str(), o.policy.c_str());
  if (o.policy != "full") std::printf(" (budget %zu tokens per KV head)", o.budget);
  std::printf(", %s truncation, %s comparisons, prefill memory budget %g MiB", o.mode.truncation.c_str(),
              o.mode.comparisons.front().c_str(),
              double(memory_budget_of(o)) / double(1 << 20));
  std::string shown = escaped(prompt.text);
  if (shown.size() > 160)
    shown = shown.substr(0, char_boundary(shown, 120)) + "..." + shown.substr(char_boundary(shown, shown.size() - 37));
  std::string size = std::to_string(prompt.text.size()) + " bytes";
  if (tok.name() != "bytes") size += ", " + std::to_string(prompt.ids.size()) + " tokens of " + tok.name();
  std::printf(", %zu new tokens", o.tokens);
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

// What the client learned.
struct Generated {
  std::vector<std::uint32_t> tokens;
  std::string text;  // decoded, valid UTF-8
  std::size_t count = 0;
  GenerationEnd end = GenerationEnd::budget;
};

// The end of a launcher or in-process run: text, summary, check, JSON lines.
int finish(const GenerateOptions& o, const std::string& mode, const std::string& transport, const Prompt& prompt,
           const text::Tokenizer& tok, const Generated& out, const json& steps, json parties, bool ok,
           bool show_text) {
  const auto& tokens = out.tokens;
  json summary = summarize(steps);
  summary["row"] = "summary";
  summary["mode"] = mode;
  summary["transport"] = transport;
  summary["link"] = o.network.link;
  summary["encrypted"] = !o.network.insecure && !o.in_process;
  summary["policy"] = o.policy;
  summary["budget"] = o.budget;
  summary["protocol"] = o.mode.protocol;
  summary["truncation"] = o.mode.truncation;
  summary["comparisons"] = o.mode.comparisons.front();
  summary["memory_budget"] = memory_budget_of(o);
  summary["model"] = o.model_dir;
  summary["tokenizer"] = tok.name();
  summary["prompt_length"] = prompt.ids.size();
  summary["prompt_tokens"] = prompt.ids;
  summary["new_tokens"] = o.tokens;
  summary["ignore_eos"] = o.ignore_eos;
  summary["eos_tokens"] = tok.eos_ids();
  summary["tokens"] = tokens;
  summary["text"] = out.text;
  summary["generated"] = out.count;
  summary["end"] = end_name(out.end);
  if (ok) {
    if (show_text) print_text(out.text, out.count, o.tokens, out.end, tokens);
    print_summary(summary, parties);
    // All the budget, or fewer ending at a stop token, every party agreeing on how many.
    if (tokens.size() != out.count || (out.count != o.tokens && out.end != GenerationEnd::eos)) ok = false;
    for (const auto& p : parties)
      if (p.value("generated", out.count) != out.count) ok = false;
  }
  if (ok && o.check) {
    summary["check"] = float64_check(o, prompt.ids, tokens);
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
  write_json_lines(o.json, lines);
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

// --threads: the pool each party's big local work is split over (none for 1).
std::unique_ptr<ComputePool> make_pool(const GenerateOptions& o) {
  return o.threads > 1 ? std::make_unique<ComputePool>(o.threads) : nullptr;
}

int run_in_process(const GenerateOptions& o, const Prompt& prompt, const text::Tokenizer& tok) {
  const auto pool = make_pool(o);  // one for all three: they take turns on this thread
  Scheduler scheduler;
  jobs::StopOnSignal stop(scheduler);
  InProcessNetwork network(scheduler, 3);
  std::optional<TimerLoop> timers;
  std::optional<LinkEmulator> emulator;
  const Link link = link_named(o.network.link);
  if (link.name != "none") {
    timers.emplace(scheduler);
    emulator.emplace(network, timers->timers(), link);
    for (PartyId id = 0; id < 3; ++id) network.endpoint(id).attach(&*emulator);
  }
  const std::string transport = network.endpoint(0).transport()->name();
  print_header(o, "3 parties in this process (" + transport + ")", prompt, tok);
  std::array<std::vector<json>, 3> rows;
  ClientConsole console(tok);
  std::vector<GenerationResult> results;
  try {
    results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
      GenerationObserver observer;
      observer.step = [&rows, &console, id](const GenerationStep& s) {
        rows[id].push_back(step_row(s, id));
        if (id == client_id) rows[id].back()["text"] = console.step(s);
      };
      if (id == client_id) observer.prefill_layer = [&console](const PrefillProgress& p) { console.progress(p); };
      co_return co_await generate_party(network.endpoint(id), job_for(o, id, &prompt.ids, &tok, pool.get()), std::move(observer),
                                        stop.token());
    });
  } catch (const Error& e) {
    if (stop.signal() == 0) throw;
    std::fprintf(stderr, "mpcache generate: stopped by signal %d: %s\n", stop.signal(), e.what());
    return 128 + stop.signal();
  }
  const bool others_learned_nothing = results[1].tokens.empty() && results[2].tokens.empty();
  json parties = json::array();
  for (int i = 0; i < 3; ++i)
    parties.push_back({{"party", i}, {"role", role(PartyId(i), o.mode.protocol)}, {"ok", true},
                       {"setup_s", results[i].setup_seconds},
                       {"setup_bytes_sent", results[i].setup_costs.payload_bytes_sent()},
                       // One process: its peak RSS is that of all three parties together.
                       {"peak_rss_kb", peak_rss_kb()}, {"peak_rss_shared_by_all_parties", true}});
  for (int i = 0; i < 3; ++i) {
    add_kv_memory(parties[i], results[i]);
    parties[i]["generated"] = results[i].generated;
    parties[i]["end"] = end_name(results[i].end);
  }
  const Generated out{results[0].tokens, console.text(), results[0].generated, results[0].end};
  return finish(o, "in-process", transport, prompt, tok, out, merge_steps(rows, o.mode.protocol), parties,
                others_learned_nothing, /*show_text=*/true);
}

// One party of a cluster (a process). Writes its JSON lines to --json.
// `prompt` and `tok`: at the client (party 0) only.
int run_cluster_party(const GenerateOptions& o, const Prompt* prompt, const text::Tokenizer* tok) {
  json party = {{"row", "party"}, {"party", o.id}, {"ok", false}};
  std::vector<json> lines;
  int stopped_by = 0;  // the signal that cancelled the generation
  auto write_lines = [&] {
    party["peak_rss_kb"] = peak_rss_kb();
    lines.push_back(party);
    write_json_lines(o.json, lines);
  };
  try {
    const jobs::ClusterConfig config = jobs::read_cluster_config(o.config);
    if (o.id < 0 || static_cast<std::size_t>(o.id) >= config.parties.size())
      throw Error(ErrorCode::bad_party, "--id " + std::to_string(o.id) + " is not a party of " + o.config);
    const auto id = static_cast<PartyId>(o.id);
    party["role"] = role(id, o.mode.protocol);
    if (id == client_id && !prompt) throw Error(ErrorCode::invalid_argument, "party 0 (the client) needs --prompt");
    const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : config.timeout_ms;
    const auto pool = make_pool(o);
    Scheduler scheduler;
    jobs::StopOnSignal stop(scheduler);
    Endpoint endpoint(scheduler, id, config.parties.size());
    jobs::ClusterConnection connection(scheduler, endpoint, config, o.config, id, o.network, timeout_ms);
    TcpTransport& transport = connection.transport();
    const std::string transport_name = endpoint.transport()->name();
    party["transport"] = transport_name;
    if (!transport.fallback_reason().empty()) party["fallback_reason"] = transport.fallback_reason();
    std::optional<ClientConsole> console;
    if (id == client_id) {
      console.emplace(*tok);
      print_header(o, "party 0 (client) of " + o.config + ", " + transport_name + ", link " + o.network.link, *prompt,
                   *tok);
    }
    GenerationObserver observer;
    observer.step = [&](const GenerationStep& s) {
      lines.push_back(step_row(s, id));
      if (console) lines.back()["text"] = console->step(s);
      // Tests: die in the middle of decoding (the others wait for step 2).
      if (o.fault == "exit" && s.step == 1) std::_Exit(3);
    };
    if (console) observer.prefill_layer = [&](const PrefillProgress& p) { console->progress(p); };
    GenerationResult result;
    try {
      result = sync_wait(scheduler, generate_party(endpoint, job_for(o, id, prompt ? &prompt->ids : nullptr, tok, pool.get()),
                                                   std::move(observer), stop.token()));
    } catch (const std::exception& e) {
      endpoint.abort(e.what());  // the peers learn why before the transport closes
      stopped_by = stop.signal();
      throw;
    }
    transport.shutdown();
    party["ok"] = true;
    party["setup_s"] = result.setup_seconds;
    party["setup_bytes_sent"] = result.setup_costs.payload_bytes_sent();
    party["prompt_length"] = result.prompt_length;
    party["new_tokens"] = result.new_tokens;
    party["wire_bytes_sent"] = transport.wire_bytes_sent();
    party["generated"] = result.generated;
    party["end"] = end_name(result.end);
    add_kv_memory(party, result);
    if (console) {
      const std::string text = console->text();
      party["tokens"] = result.tokens;
      party["text"] = text;
      party["prompt_tokens"] = prompt->ids;
      print_text(text, result.generated, result.new_tokens, result.end, result.tokens);
    } else {
      std::printf("mpcache generate: party %u (%s) done: %zu tokens generated (%s), learned none of them\n", id,
                  role(id, o.mode.protocol), result.generated, end_name(result.end));
    }
    write_lines();
    return 0;
  } catch (const std::exception& e) {
    party["error"] = e.what();
    std::fflush(stdout);
    std::fprintf(stderr, "mpcache generate: party %d: %s\n", o.id, e.what());
    write_lines();
    return stopped_by != 0 ? 128 + stopped_by : 1;
  }
}

std::vector<json> read_json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// Three party processes on loopback, fresh keys; the client's stdout is ours.
int run_launcher(const GenerateOptions& o, const Prompt& prompt, const text::Tokenizer& tok, const std::string& self) {
  const auto [fault_party, fault_kind] = jobs::parse_fault(o.fault, {"exit"});
  if (fault_party >= 0 && o.tokens < 3)
    throw Error(ErrorCode::invalid_argument, "--fault: the party dies after decode step 1, so --tokens must be >= 3");
  const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : default_generate_timeout_ms;
  jobs::LocalCluster cluster(o.network.insecure, timeout_ms);
  const std::string prompt_file = cluster.file("prompt.txt");  // read by party 0 only
  jobs::write_text_file(prompt_file, prompt.text, true);
  std::vector<jobs::PartyProcess> processes;
  for (int i = 0; i < 3; ++i) {
    jobs::PartyProcess p;
    p.args = {self, "generate", "--config", cluster.config_path(), "--id", std::to_string(i), "--model",
              o.model_dir, "--tokens", std::to_string(o.tokens), "--policy", o.policy, "--budget",
              std::to_string(o.budget), "--json",
              cluster.file("party-" + std::to_string(i) + ".jsonl")};
    const auto mode_args = o.mode.args();
    p.args.insert(p.args.end(), mode_args.begin(), mode_args.end());
    const auto network_args = o.network.args();
    p.args.insert(p.args.end(), network_args.begin(), network_args.end());
    if (o.allow_unused_weights) p.args.push_back("--allow-unused-weights");
    if (o.compact_weights) p.args.push_back("--compact-weights");
    if (o.threads > 1) p.args.insert(p.args.end(), {"--threads", std::to_string(o.threads)});
    p.args.insert(p.args.end(), {"--memory-budget", std::to_string(memory_budget_of(o))});
    // The client's alone: its prompt and its tokenizer.
    if (i == 0) p.args.insert(p.args.end(), {"--prompt-file", prompt_file, "--tokenizer", o.tokenizer});
    if (i == 0 && o.ignore_eos) p.args.push_back("--ignore-eos");
    if (i == fault_party) p.args.insert(p.args.end(), {"--fault", fault_kind});
    p.quiet = i != 0;  // the client's lines are the output; others' errors still reach stderr
    processes.push_back(std::move(p));
  }
  std::printf("mpcache generate: 3 party processes on this host (loopback TCP, %s, fresh keys), link %s\n",
              o.network.insecure ? "plain, --insecure" : "AES-GCM", o.network.link.c_str());
  std::fflush(stdout);
  bool killed_late = false;
  int stopped_by = 0;
  const auto exits =
      jobs::run_party_processes(processes, fault_party, 3 * timeout_ms + 3600 * 1000, &killed_late, &stopped_by);

  std::array<std::vector<json>, 3> rows;
  json parties = json::array();
  bool ok = !killed_late;
  std::string transport;
  Generated out;
  for (int i = 0; i < 3; ++i) {
    json party = {{"party", i}, {"ok", false}, {"error", "no report (the process died)"}};
    try {
      for (auto& line : read_json_lines(cluster.file("party-" + std::to_string(i) + ".jsonl"))) {
        if (line["row"] == "step") rows[i].push_back(line);
        if (line["row"] == "party") party = line;
      }
    } catch (const std::exception&) {
    }
    party["exit_status"] = exits[i].status;
    ok = ok && exits[i].ok && party.value("ok", false);
    if (party.contains("transport")) transport = party["transport"];
    if (i == client_id && party.contains("tokens")) {
      out.tokens = party["tokens"].get<std::vector<std::uint32_t>>();
      out.text = party.value("text", std::string());
      out.count = party.value("generated", std::size_t{0});
      out.end = party.value("end", std::string()) == "eos" ? GenerationEnd::eos : GenerationEnd::budget;
    }
    if (!party.value("ok", false) || !exits[i].ok)
      std::fprintf(stderr, "mpcache generate: party %d failed: %s\n", i,
                   party.value("error", std::string("exit status ") + std::to_string(exits[i].status)).c_str());
    parties.push_back(party);
  }
  if (killed_late) std::fprintf(stderr, "mpcache generate: parties still running after the limit were killed\n");
  if (stopped_by != 0) {
    std::fprintf(stderr, "mpcache generate: stopped by signal %d; the parties cancelled the generation%s\n",
                 stopped_by, killed_late ? " (those still running after the grace period were killed)" : "");
    return 128 + stopped_by;
  }
  if (ok) std::printf("transport %s\n", transport.c_str());
  return finish(o, "3 processes", transport, prompt, tok, out, ok ? merge_steps(rows, o.mode.protocol) : json::array(),
                parties, ok, /*show_text=*/false);  // the client process printed it
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
  o.network.check();
  (void)o.mode.mode();  // a mode no backend offers is an error before any work
  if (o.budget == 0) o.budget = kv::default_budget(o.policy);
  (void)kv::make_policy<Ref>(o.policy, o.budget);  // a budget the policy cannot use is an error before any work
  // The model's shape is public: every party reads config.json first.
  const ModelConfig c = ModelConfig::from_json_file(o.model_dir + "/config.json");

  // The prompt and the tokenizer: the client's (party 0 in a cluster; the
  // launcher otherwise). The other parties read neither.
  const bool has_prompt = !party_mode || o.id == static_cast<int>(client_id);
  Prompt prompt;
  std::unique_ptr<text::Tokenizer> tok;
  if (has_prompt) {
    tok = client_tokenizer(o.tokenizer, o.model_dir, c.vocab_size);
    prompt.text = o.prompt_file.empty() ? o.prompt : jobs::read_text_file(o.prompt_file, "prompt file");
    prompt.ids = encode_prompt(*tok, prompt.text);
    if (prompt.ids.empty()) throw Error(ErrorCode::invalid_argument, "empty prompt");
    if (prompt.ids.size() + o.tokens > c.max_positions)
      throw Error(ErrorCode::invalid_argument,
                  "prompt (" + std::to_string(prompt.ids.size()) + " tokens) + --tokens " + std::to_string(o.tokens) +
                      " exceed the model's " + std::to_string(c.max_positions) + " positions");
  }
  if (party_mode) return run_cluster_party(o, has_prompt ? &prompt : nullptr, tok.get());
  if (o.in_process) return run_in_process(o, prompt, *tok);
  return run_launcher(o, prompt, *tok, self);
}

}  // namespace mpcache::tools
