// `mpcache generate`: private greedy generation with a KV-cache policy under
// rss3 or add2 (--protocol). Three modes (the generation itself is `mpcache::generate_party`, the
// same in all three):
//   * default: this launcher starts three `generate --config --id` processes
//     on loopback (free ports, fresh keys; TCP, io_uring, AES-GCM), streams
//     the client's output and merges the parties' reports;
//   * --config FILE --id N: one party of a real cluster; party 0 is the
//     client (prompt, tokenizer, learns the text), party 1 the model owner
//     (reads the weights), party 2 holds nothing (rss3) or deals
//     correlations (add2); parties 1 and 2 read only config.json;
//   * --in-process: all three parties in this process (debugging).
// Include after `import mpcache;`.
#pragma once
#include "network_choice.hpp"       // src/jobs
#include "protocol_mode_flags.hpp"  // src/jobs
#include <cstddef>
#include <string>

namespace mpcache::tools {

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
  jobs::ProtocolModeFlags mode;      // --protocol, --truncation, --comparisons and the offline budgets
  bool compact_weights = false;      // rss3: 8 bytes per weight and party, decode slower (Rss3Options)
  jobs::NetworkChoice network;       // TCP parties: backend, spin, encryption, emulated link
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

// `self` is this executable (re-run as the parties by the launcher).
int run_generate(const GenerateOptions& options, const std::string& self);

}  // namespace mpcache::tools
