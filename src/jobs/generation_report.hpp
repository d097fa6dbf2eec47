// The rows `mpcache generate` reports (--json, one JSON object a line): a
// party's step rows, the steps merged across parties, the run's summary and
// the parties' rows. Include after `import mpcache;` and `import mpcache.text;`.
#pragma once
#include <array>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "generate_job.hpp"

namespace mpcache::jobs {

// Party `id`'s row of a step: latency, bytes sent, its Lamport clocks.
nlohmann::json step_row(const GenerationStep& s, PartyId id);

// Each step across the parties (merge_party_costs): latency of the slowest,
// bytes of the busiest, rounds on the critical path. Under add2 (`dealt`)
// party 2's step is offline work: its bytes are the row's offline_bytes.
// The client's token and text at the step (party 0's row) are kept.
nlohmann::json steps_across_parties(const std::array<std::vector<nlohmann::json>, 3>& rows, bool dealt);

// The summary row: the run's settings, the prefill's costs and the decode
// steps' means (from merged `steps`), what the client learned.
nlohmann::json generation_summary(const GenerateOptions& o, const std::string& mode, const std::string& transport,
                                  const Prompt& prompt, const text::Tokenizer& tok, const Generated& out,
                                  const nlohmann::json& steps);

// A party row's KV cache sizes at the end of the generation.
void add_kv_memory(nlohmann::json& party, const GenerationResult& result);

// This process's peak resident set, in kilobytes.
long peak_rss_kb();

void write_json_lines(const std::string& path, const std::vector<nlohmann::json>& lines);  // "" writes nothing
std::vector<nlohmann::json> read_json_lines(const std::string& path);

}  // namespace mpcache::jobs
