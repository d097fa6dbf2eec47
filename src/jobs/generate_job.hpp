// `mpcache generate`'s job: private greedy generation with a KV-cache
// policy under rss3 or add2, run three ways (the generation itself is
// mpcache::generate_party, the same in all three):
//   * launch_generate_parties: three `generate --config --id` processes on
//     loopback (free ports, fresh keys; TCP, io_uring, AES-GCM), their
//     reports merged;
//   * run_generate_party: one party of a real cluster; party 0 is the
//     client (prompt, tokenizer, learns the text), party 1 the model owner
//     (reads the weights), party 2 holds nothing (rss3) or deals
//     correlations (add2); parties 1 and 2 read only config.json;
//   * run_generate_in_process: all three parties in this process.
// The CLI parses the flags and prints (tools/generate.cpp); what the client
// sees while it runs comes back through a ClientView.
// Include after `import mpcache;` and `import mpcache.text;`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "network_choice.hpp"
#include "protocol_mode_flags.hpp"

namespace mpcache::jobs {

inline constexpr PartyId generate_client = 0;  // gives the prompt, alone learns the text
inline constexpr PartyId generate_owner = 1;   // alone reads the weights file

// Local work between two messages can be long (the owner shares a model's
// weights; a long prompt's prefill layer on a slow build), so the launcher's
// default silence deadline is a minute, not the 10 s of a micro job.
inline constexpr int default_generate_timeout_ms = 60000;

struct GenerateOptions {
  std::string model_dir;             // config.json + model.safetensors (+ the tokenizer's files)
  std::string prompt;                // the client's prompt (text)
  std::string prompt_file;           // if set, read the prompt from this file instead
  std::size_t tokens = 16;           // tokens to generate (at most: fewer if the model ends its text)
  // The client's tokenizer (read by the client alone): auto (the model
  // folder's files, or its mpcache.json's "tokenizer": "none"), none (token
  // id = byte value), or a folder holding one.
  std::string tokenizer = "auto";
  bool ignore_eos = false;           // go on past the tokenizer's end-of-sequence tokens
  std::size_t budget = 0;            // tokens attended per KV head per step (0: kv::default_budget(policy))
  std::string policy = "mpcache";    // mpcache | mpcache-paper | full
  std::size_t speculate = 0;         // drafts each decode step verifies (0: none)
  std::string draft = "lookup";      // the client's drafter: lookup | ngram:FILE
  ProtocolModeFlags mode;            // --protocol, --truncation, --comparisons and the offline budgets
  bool compact_weights = false;      // rss3: 8 bytes per weight and party, decode slower (Rss3Options)
  NetworkChoice network;             // TCP parties: backend, spin, encryption, emulated link
  int timeout_ms = -1;               // peer silence deadline (-1: the config's, else default_generate_timeout_ms)
  bool allow_unused_weights = false; // run even if the config leaves tensors of the file unused
  bool in_process = false;
  std::size_t threads = 1;           // each party's ComputePool (1: none, all work on the loop's thread)
  std::string memory_budget;         // the prefill's working set per party (parse_memory_size; empty: the default)
  bool check = false;                // float64 reference check (launcher / in-process only)
  std::string json;                  // JSON lines: one row per step, a summary, parties
  std::string config;                // join this cluster as party `id`
  int id = -1;
  std::string fault;                 // launcher: PARTY:exit; party: exit (dies in decode step 2)
};

// "client", "model owner", "dealer" (add2's party 2) or "helper".
const char* generate_role(PartyId id, const std::string& protocol);
// --memory-budget in bytes (none given: the library's default).
std::size_t memory_budget_of(const GenerateOptions& o);

// The client's prompt: its text, and its token ids.
struct Prompt {
  std::string text;
  std::vector<std::uint32_t> ids;
};

// What the client's terminal shows while the parties generate. Every member
// is optional.
struct ClientView {
  std::function<void(const std::string& transport)> started;  // connected, before any work
  std::function<void(const PrefillProgress&)> progress;       // a prefill layer done
  std::function<std::string(const GenerationStep&)> step;     // shows the step; returns the text its token adds
  std::function<std::string()> text;                          // the whole text, once generation is over
};

// What the client learned.
struct Generated {
  std::vector<std::uint32_t> tokens;
  std::string text;  // decoded, valid UTF-8
  std::size_t count = 0;
  GenerationEnd end = GenerationEnd::budget;
};

// A launcher's or in-process run: the steps merged across parties
// (generation_report.hpp), each party's row, what the client learned.
struct GenerateRun {
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json parties = nlohmann::json::array();
  Generated out;
  std::string transport;
  bool ok = false;        // every party reported success
  bool killed_late = false;  // launcher: parties still running after the limit were killed
  int stopped_by = 0;     // SIGINT, SIGTERM or SIGHUP that cancelled the run (0 if none)
};

// What every party checks before any work, as `mpcache generate` does: the
// network and protocol choices, the policy and its budget (o.budget's default
// filled in), the model's public config.json, which it returns.
ModelConfig check_generate_options(GenerateOptions& o);
// The client's tokenizer, and its prompt (o.prompt, or o.prompt_file) as
// tokens, checked against the model's positions. Read by the client alone.
std::unique_ptr<text::Tokenizer> client_prompt(const GenerateOptions& o, const ModelConfig& c, Prompt& prompt);

// `tok`: the client's tokenizer (its EOS ids end the generation unless
// --ignore-eos).
GenerateRun run_generate_in_process(const GenerateOptions& o, const Prompt& prompt, const text::Tokenizer& tok,
                                    const ClientView& view);

// Three party processes on loopback, `self` re-run as `self generate
// --config ... --id N`; the client's stdout is ours, the others' is quiet.
// `starting` runs once the options are checked, before any process starts.
// `client_output` false: the client process's stdout goes to /dev/null too
// (a library caller, such as the Python package, takes the text from the run).
GenerateRun launch_generate_parties(const GenerateOptions& o, const Prompt& prompt, const std::string& self,
                                    const std::function<void()>& starting = {}, bool client_output = true);

// One party of a cluster (this process): writes its JSON lines to --json.
// `prompt` and `tok`: at the client (party 0) only, and `view` is the
// client's.
struct GeneratePartyRun {
  GenerationResult result;  // when ok
  std::string text;         // the client's, when ok
  std::string error;        // when not ok
  int exit_code = 1;        // 0, 1, or 128 + the signal that cancelled it
};
GeneratePartyRun run_generate_party(const GenerateOptions& o, const Prompt* prompt, const text::Tokenizer* tok,
                                    const ClientView& view);

}  // namespace mpcache::jobs
