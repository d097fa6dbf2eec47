// `mpcache generate` in this process: all three parties, or one party of a
// cluster (see generate_job.hpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdlib>
#include <nlohmann/json.hpp>
import mpcache.text;
import mpcache;
#include "client_text.hpp"
#include "cluster_config.hpp"
#include "cluster_connect.hpp"
#include "drafter_choice.hpp"
#include "generate_job.hpp"
#include "generation_report.hpp"
#include "stop_on_signal.hpp"

namespace mpcache::jobs {

using nlohmann::json;

const char* generate_role(PartyId id, const std::string& protocol) {
  return id == generate_client ? "client"
         : id == generate_owner ? "model owner"
         : protocol == "add2"   ? "dealer"
                                : "helper";
}

std::size_t memory_budget_of(const GenerateOptions& o) {
  return o.memory_budget.empty() ? default_prefill_memory_budget : parse_memory_size(o.memory_budget);
}

ModelConfig check_generate_options(GenerateOptions& o) {
  o.network.check();
  (void)o.mode.mode();  // a mode no backend offers is an error before any work
  if (o.budget == 0) o.budget = kv::default_budget(o.policy);
  {
    const auto policy = kv::make_policy<Ref>(o.policy, o.budget);  // a budget the policy cannot use is an error before any work
    if (o.speculate > max_speculated_tokens)
      throw Error(ErrorCode::invalid_argument, "--speculate " + std::to_string(o.speculate) + " is outside 0.." +
                                                   std::to_string(max_speculated_tokens));
    if (o.speculate > 0) {
      check_speculative_policy<kv::AnyPolicy<Ref>, Ref>(policy);
      if (o.mode.protocol != "rss3")
        throw Error(ErrorCode::invalid_argument, "--speculate runs under --protocol rss3, not " + o.mode.protocol);
      check_drafter_name(o.draft);  // a bad --draft, before any work
    }
  }
  // The model's shape is public: every party reads config.json first.
  return ModelConfig::from_json_file(o.model_dir + "/config.json");
}

std::unique_ptr<text::Tokenizer> client_prompt(const GenerateOptions& o, const ModelConfig& c, Prompt& prompt) {
  auto tok = client_tokenizer(o.tokenizer, o.model_dir, c.vocab_size);
  prompt.text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file, "prompt file");
  prompt.ids = encode_prompt(*tok, prompt.text);
  if (prompt.ids.empty()) throw Error(ErrorCode::invalid_argument, "empty prompt");
  if (o.speculate > 0) check_drafter_name(o.draft, /*client=*/true);  // its file, before any work
  if (prompt.ids.size() + o.tokens > c.max_positions)
    throw Error(ErrorCode::invalid_argument,
                "prompt (" + std::to_string(prompt.ids.size()) + " tokens) + --tokens " + std::to_string(o.tokens) +
                    " exceed the model's " + std::to_string(c.max_positions) + " positions");
  return tok;
}

namespace {

GenerationJob job_for(const GenerateOptions& o, PartyId id, const Prompt* prompt, const text::Tokenizer* tok,
                      ComputePool* pool) {
  GenerationJob job;
  job.model_dir = o.model_dir;
  job.client = generate_client;
  job.owner = generate_owner;
  if (id == generate_client && prompt) job.prompt = prompt->ids;
  if (id == generate_client && tok && !o.ignore_eos) job.stop_tokens = tok->eos_ids();
  job.speculate = o.speculate;
  if (id == generate_client && tok && o.speculate > 0)
    job.draft = drafter_named(o.draft, ModelConfig::from_json_file(o.model_dir + "/config.json").vocab_size,
                              [tok](std::string_view text) { return tok->encode(text); });
  job.new_tokens = o.tokens;
  job.policy = o.policy;
  job.budget = o.budget;
  job.memory_budget = memory_budget_of(o);
  job.unused_weights = o.allow_unused_weights ? UnusedTensors::allow : UnusedTensors::reject;
  job.mode = o.mode.mode();
  job.rss3.compact_weights = o.compact_weights;
  job.rss3.pool = job.add2.pool = pool;
  return job;
}

// --threads: the pool each party's big local work is split over (none for 1).
std::unique_ptr<ComputePool> make_pool(const GenerateOptions& o) {
  return o.threads > 1 ? std::make_unique<ComputePool>(o.threads) : nullptr;
}

// The client's view as the generation's observer; the step rows go to `rows`.
GenerationObserver observe(PartyId id, std::vector<json>& rows, const ClientView* view) {
  GenerationObserver observer;
  observer.step = [id, &rows, view](const GenerationStep& s) {
    rows.push_back(step_row(s, id));
    if (view && view->step) rows.back()["text"] = view->step(s);
  };
  if (view && view->progress) observer.prefill_layer = view->progress;
  return observer;
}

}  // namespace

GenerateRun run_generate_in_process(const GenerateOptions& o, const Prompt& prompt, const text::Tokenizer& tok,
                                    const ClientView& view) {
  const auto pool = make_pool(o);  // one for all three: they take turns on this thread
  Scheduler scheduler;
  StopOnSignal stop(scheduler);
  InProcessNetwork network(scheduler, 3);
  std::optional<TimerLoop> timers;
  std::optional<LinkEmulator> emulator;
  const Link link = link_named(o.network.link);
  if (link.name != "none") {
    timers.emplace(scheduler);
    emulator.emplace(network, timers->timers(), link);
    for (PartyId id = 0; id < 3; ++id) network.endpoint(id).attach(&*emulator);
  }
  GenerateRun run;
  run.transport = network.endpoint(0).transport()->name();
  if (view.started) view.started(run.transport);
  std::array<std::vector<json>, 3> rows;
  std::vector<GenerationResult> results;
  try {
    results = run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
      const ClientView* client_view = id == generate_client ? &view : nullptr;
      co_return co_await generate_party(network.endpoint(id), job_for(o, id, &prompt, &tok, pool.get()),
                                        observe(id, rows[id], client_view), stop.token());
    });
  } catch (const Error&) {
    if (stop.signal() == 0) throw;
    run.stopped_by = stop.signal();
    return run;
  }
  for (int i = 0; i < 3; ++i) {
    json party = {{"party", i}, {"role", generate_role(PartyId(i), o.mode.protocol)}, {"ok", true},
                  {"setup_s", results[i].setup_seconds},
                  {"setup_bytes_sent", results[i].setup_costs.payload_bytes_sent()},
                  // One process: its peak RSS is that of all three parties together.
                  {"peak_rss_kb", peak_rss_kb()}, {"peak_rss_shared_by_all_parties", true}};
    add_kv_memory(party, results[i]);
    party["generated"] = results[i].generated;
    party["end"] = end_name(results[i].end);
    run.parties.push_back(party);
  }
  // The others learned nothing.
  run.ok = results[1].tokens.empty() && results[2].tokens.empty();
  run.out = {results[0].tokens, view.text ? view.text() : std::string(), results[0].generated, results[0].end};
  run.steps = steps_across_parties(rows, o.mode.protocol == "add2");
  return run;
}

GeneratePartyRun run_generate_party(const GenerateOptions& o, const Prompt* prompt, const text::Tokenizer* tok,
                                    const ClientView& view) {
  GeneratePartyRun run;
  json party = {{"row", "party"}, {"party", o.id}, {"ok", false}};
  std::vector<json> lines;
  int stopped_by = 0;  // the signal that cancelled the generation
  auto write_lines = [&] {
    party["peak_rss_kb"] = peak_rss_kb();
    lines.push_back(party);
    write_json_lines(o.json, lines);
  };
  try {
    const ClusterConfig config = read_cluster_config(o.config);
    if (o.id < 0 || static_cast<std::size_t>(o.id) >= config.parties.size())
      throw Error(ErrorCode::bad_party, "--id " + std::to_string(o.id) + " is not a party of " + o.config);
    const auto id = static_cast<PartyId>(o.id);
    party["role"] = generate_role(id, o.mode.protocol);
    const bool client = id == generate_client;
    if (client && !prompt) throw Error(ErrorCode::invalid_argument, "party 0 (the client) needs --prompt");
    const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : config.timeout_ms;
    const auto pool = make_pool(o);
    Scheduler scheduler;
    StopOnSignal stop(scheduler);
    Endpoint endpoint(scheduler, id, config.parties.size());
    ClusterConnection connection(scheduler, endpoint, config, o.config, id, o.network, timeout_ms);
    TcpTransport& transport = connection.transport();
    party["transport"] = endpoint.transport()->name();
    if (!transport.fallback_reason().empty()) party["fallback_reason"] = transport.fallback_reason();
    if (client && view.started) view.started(endpoint.transport()->name());
    GenerationObserver observer = observe(id, lines, client ? &view : nullptr);
    // Tests: die in the middle of decoding (the others wait for step 2).
    if (o.fault == "exit")
      observer.step = [record = std::move(observer.step)](const GenerationStep& s) {
        record(s);
        if (s.step == 1) std::_Exit(3);
      };
    try {
      run.result = sync_wait(scheduler, generate_party(endpoint, job_for(o, id, prompt, tok, pool.get()),
                                                       std::move(observer), stop.token()));
    } catch (const std::exception& e) {
      endpoint.abort(e.what());  // the peers learn why before the transport closes
      stopped_by = stop.signal();
      throw;
    }
    transport.shutdown();
    const GenerationResult& result = run.result;
    party["ok"] = true;
    party["setup_s"] = result.setup_seconds;
    party["setup_bytes_sent"] = result.setup_costs.payload_bytes_sent();
    party["prompt_length"] = result.prompt_length;
    party["new_tokens"] = result.new_tokens;
    party["wire_bytes_sent"] = transport.wire_bytes_sent();
    party["generated"] = result.generated;
    party["end"] = end_name(result.end);
    add_kv_memory(party, result);
    if (client) {
      run.text = view.text ? view.text() : std::string();
      party["tokens"] = result.tokens;
      party["text"] = run.text;
      party["prompt_tokens"] = prompt->ids;
    }
    write_lines();
    run.exit_code = 0;
  } catch (const std::exception& e) {
    run.error = e.what();
    party["error"] = run.error;
    write_lines();
    run.exit_code = stopped_by != 0 ? 128 + stopped_by : 1;
  }
  return run;
}

}  // namespace mpcache::jobs
