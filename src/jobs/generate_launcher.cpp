// `mpcache generate`'s local launcher: three party processes on loopback,
// their reports merged (see generate_job.hpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
import mpcache.text;
import mpcache;
#include "cluster_config.hpp"
#include "generate_job.hpp"
#include "generation_report.hpp"
#include "local_cluster.hpp"

namespace mpcache::jobs {
namespace {

using nlohmann::json;

// Party i's command line: `self generate --config ... --id i` with the run's
// flags; the client's alone carry its prompt and its tokenizer.
std::vector<std::string> party_command(const GenerateOptions& o, const LocalCluster& cluster, int i,
                                       const std::string& self, const std::string& prompt_file,
                                       const std::string& fault) {
  std::vector<std::string> args = {self, "generate", "--config", cluster.config_path(), "--id", std::to_string(i),
                                   "--model", o.model_dir, "--tokens", std::to_string(o.tokens), "--policy", o.policy,
                                   "--budget", std::to_string(o.budget), "--json",
                                   cluster.file("party-" + std::to_string(i) + ".jsonl")};
  const auto mode_args = o.mode.args();
  args.insert(args.end(), mode_args.begin(), mode_args.end());
  const auto network_args = o.network.args();
  args.insert(args.end(), network_args.begin(), network_args.end());
  if (o.allow_unused_weights) args.push_back("--allow-unused-weights");
  if (o.compact_weights) args.push_back("--compact-weights");
  if (o.threads > 1) args.insert(args.end(), {"--threads", std::to_string(o.threads)});
  args.insert(args.end(), {"--memory-budget", std::to_string(memory_budget_of(o))});
  if (i == 0) args.insert(args.end(), {"--prompt-file", prompt_file, "--tokenizer", o.tokenizer});
  if (i == 0 && o.ignore_eos) args.push_back("--ignore-eos");
  if (!fault.empty()) args.insert(args.end(), {"--fault", fault});
  return args;
}

}  // namespace

GenerateRun launch_generate_parties(const GenerateOptions& o, const Prompt& prompt, const std::string& self,
                                    const std::function<void()>& starting, bool client_output) {
  const auto [fault_party, fault_kind] = parse_fault(o.fault, {"exit"});
  if (fault_party >= 0 && o.tokens < 3)
    throw Error(ErrorCode::invalid_argument, "--fault: the party dies after decode step 1, so --tokens must be >= 3");
  const int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : default_generate_timeout_ms;
  LocalCluster cluster(o.network.insecure, timeout_ms);
  const std::string prompt_file = cluster.file("prompt.txt");  // read by party 0 only
  write_text_file(prompt_file, prompt.text, true);
  std::vector<PartyProcess> processes;
  for (int i = 0; i < 3; ++i) {
    PartyProcess p;
    p.args = party_command(o, cluster, i, self, prompt_file, i == fault_party ? fault_kind : "");
    p.quiet = i != 0 || !client_output;  // the client's lines are the output; others' errors still reach stderr
    processes.push_back(std::move(p));
  }
  if (starting) starting();
  GenerateRun run;
  const auto exits =
      run_party_processes(processes, fault_party, 3 * timeout_ms + 3600 * 1000, &run.killed_late, &run.stopped_by);

  std::array<std::vector<json>, 3> rows;
  run.ok = !run.killed_late;
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
    run.ok = run.ok && exits[i].ok && party.value("ok", false);
    if (party.contains("transport")) run.transport = party["transport"];
    if (i == generate_client && party.contains("tokens")) {
      run.out.tokens = party["tokens"].get<std::vector<std::uint32_t>>();
      run.out.text = party.value("text", std::string());
      run.out.count = party.value("generated", std::size_t{0});
      run.out.end = party.value("end", std::string()) == "eos" ? GenerationEnd::eos : GenerationEnd::budget;
    }
    run.parties.push_back(party);
  }
  if (run.ok) run.steps = steps_across_parties(rows, o.mode.protocol == "add2");
  return run;
}

}  // namespace mpcache::jobs
