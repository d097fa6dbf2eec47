// See generation_report.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <sys/resource.h>
#include <nlohmann/json.hpp>
import mpcache.text;
import mpcache;
#include "cluster_config.hpp"
#include "cost_rows.hpp"
#include "generation_report.hpp"

namespace mpcache::jobs {

using nlohmann::json;

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
  if (s.drafted > 0) {
    row["drafted"] = s.drafted;
    row["accepted"] = s.accepted;
  }
  if (s.tokens.size() > 1) row["tokens"] = s.tokens;
  return row;
}

json steps_across_parties(const std::array<std::vector<json>, 3>& rows, bool dealt) {
  json out = json::array();
  const std::size_t steps = std::min({rows[0].size(), rows[1].size(), rows[2].size()});
  for (std::size_t k = 0; k < steps; ++k) {
    std::array<PartyCost, 3> parties;
    for (std::size_t i = 0; i < 3; ++i) parties[i] = party_cost_of_row(rows[i][k], /*offline=*/dealt && i == 2);
    const MergedCost m = merge_party_costs(parties);
    out.push_back({{"row", "step"},
                   {"phase", rows[0][k].at("phase")},
                   {"step", k},
                   {"latency_s", m.latency_s},
                   {"bytes_max_party", m.bytes_max_party},
                   {"bytes_total", m.bytes_total},
                   {"offline_bytes", m.offline_bytes},
                   {"rounds", m.rounds}});
    // What the client (party 0) learned at this step, where its row says.
    for (const char* key : {"token", "tokens", "text", "drafted", "accepted"})
      if (rows[0][k].contains(key)) out.back()[key] = rows[0][k][key];
  }
  return out;
}

namespace {

// The prefill, and decode steps on average.
json step_means(const json& steps) {
  json s = json::object();
  double decode_s = 0, decode_bytes = 0, decode_rounds = 0, decode_offline = 0;
  std::size_t decodes = 0, decoded_tokens = 0, drafted = 0, accepted = 0;
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
      const std::size_t step_accepted = r.value("accepted", std::size_t{0});
      decoded_tokens += 1 + step_accepted;
      drafted += r.value("drafted", std::size_t{0});
      accepted += step_accepted;
    }
  }
  if (decodes > 0) {
    s["decode_steps"] = decodes;
    s["decode_latency_s_mean"] = decode_s / double(decodes);
    s["decode_bytes_max_party_mean"] = decode_bytes / double(decodes);
    s["decode_rounds_mean"] = decode_rounds / double(decodes);
    s["decode_offline_bytes_mean"] = decode_offline / double(decodes);
    // Per token the decode steps chose (speculation: more than one a step).
    s["decoded_tokens"] = decoded_tokens;
    s["decode_rounds_per_token"] = decode_rounds / double(decoded_tokens);
    s["decode_latency_s_per_token"] = decode_s / double(decoded_tokens);
    s["decode_bytes_max_party_per_token"] = decode_bytes / double(decoded_tokens);
    if (drafted > 0) {
      s["drafted"] = drafted;
      s["accepted"] = accepted;
    }
  }
  return s;
}

}  // namespace

json generation_summary(const GenerateOptions& o, const std::string& mode, const std::string& transport,
                        const Prompt& prompt, const text::Tokenizer& tok, const Generated& out, const json& steps) {
  json summary = step_means(steps);
  summary["row"] = "summary";
  summary["mode"] = mode;
  summary["transport"] = transport;
  summary["link"] = o.network.link;
  summary["encrypted"] = !o.network.insecure && !o.in_process;
  summary["policy"] = o.policy;
  summary["speculate"] = o.speculate;
  if (o.speculate > 0) summary["draft"] = o.draft;
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
  summary["tokens"] = out.tokens;
  summary["text"] = out.text;
  summary["generated"] = out.count;
  summary["end"] = end_name(out.end);
  return summary;
}

void add_kv_memory(json& party, const GenerationResult& result) {
  party["weight_bytes"] = result.weight_bytes;
  party["weights"] = result.weights;
  party["kv_decoder_bytes"] = result.kv_decoder_bytes;
  if (result.kv_policy_bytes) party["kv_policy_bytes"] = *result.kv_policy_bytes;
  party["kv_backing_bytes"] = result.kv_backing_bytes;
}

long peak_rss_kb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // kilobytes on Linux
}

void write_json_lines(const std::string& path, const std::vector<json>& lines) {
  if (path.empty()) return;
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  write_text_file(path, text, false);
}

std::vector<json> read_json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

}  // namespace mpcache::jobs
