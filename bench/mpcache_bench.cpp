// mpcache-bench --preset NAME [--json] [--repeat N]   (fidelity, private-fidelity, truncation-audit and the
// paper-scale presets paper-fig10/paper-fig11/paper-fig13/paper-table8/gpt2-512/long-context, serve, serve-soak: see their files)
// Prints one row per case: latency, payload bytes (busiest party and total),
// message headers, rounds on the critical path. With --json, one JSON object
// per line on stdout.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <iostream>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "bench_case.hpp"
#include "cpu_load.hpp"
#include "process_allocator.hpp"

namespace mpcache::bench {
std::vector<CaseResult> rss3_preset(const std::string& preset, const Options& options);
int fidelity_main(int argc, char** argv);  // its own options and row format
int private_fidelity_main(int argc, char** argv);  // rss3 tokens vs the float64 argmax
int truncation_audit_main(int argc, char** argv);  // expected truncation failures per call site
int paper_main(int argc, char** argv);  // paper-fig10, paper-fig11, paper-fig13, paper-table8, gpt2-512, long-context
int serve_preset_main(int argc, char** argv);  // the service: 3 server processes, batches of clients
int serve_soak_main(int argc, char** argv);    // the service over time: random clients and client faults
int speculate_preset_main(int argc, char** argv);  // speculative verification against K = 0
std::vector<CaseResult> net_preset(const Options& options);
std::vector<CaseResult> kernels_preset(const Options& options);
std::vector<CaseResult> decode_batch_preset(const Options& options);  // continuous batching's step, B = 1..8
std::vector<CaseResult> speculate_rows_preset(const Options& options);  // a step of K+1 rows against one, K = 1..8
}

namespace {
using mpcache::bench::CaseResult;

nlohmann::json to_json(const CaseResult& c, const mpcache::Link& link) {
  nlohmann::json j = {{"case", c.name},
          {"protocol", c.protocol},
          {"transport", c.transport},
          {"elements", c.elements},
          {"latency_s", c.latency_s},
          {"bytes_max_party", c.bytes_max_party},
          {"bytes_total", c.bytes_total},
          {"frame_bytes_total", c.frame_bytes_total},
          {"messages_max_party", c.messages_max_party},
          {"rounds", c.rounds},
          {"offline_bytes", c.offline_bytes},
          {"repeat", c.repeat},
          {"threads", c.threads},
          {"link", c.link.empty() ? link.name : c.link},
          {"link_emulated", c.link_emulated},
          {"model_s", mpcache::bench::model_seconds(c, link)}};
  if (!c.note.empty()) j["note"] = c.note;
  return j;
}

void print_table(const std::vector<CaseResult>& rows, const mpcache::Link& link) {
  std::printf("%-28s %-6s %-11s %11s %11s %16s %16s %7s  %s\n", "case", "proto", "transport",
              "latency_s", ("model_s:" + link.name).c_str(), "bytes_max_party", "bytes_total",
              "rounds", "note");
  for (const auto& c : rows)
    std::printf("%-28s %-6s %-11s %11.6f %11.6f %16llu %16llu %7llu  %s\n", c.name.c_str(),
                c.protocol.c_str(), c.transport.c_str(), c.latency_s,
                mpcache::bench::model_seconds(c, link),
                static_cast<unsigned long long>(c.bytes_max_party),
                static_cast<unsigned long long>(c.bytes_total),
                static_cast<unsigned long long>(c.rounds), c.note.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  mpcache::jobs::tune_allocator_for_party();  // as the parties of `mpcache generate`
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "--preset" && std::string_view(argv[i + 1]) == "fidelity")
      return mpcache::bench::fidelity_main(argc, argv);
    else if (std::string_view(argv[i]) == "--preset" && std::string_view(argv[i + 1]) == "private-fidelity")
      return mpcache::bench::private_fidelity_main(argc, argv);
    else if (std::string_view(argv[i]) == "--preset" && std::string_view(argv[i + 1]) == "truncation-audit")
      return mpcache::bench::truncation_audit_main(argc, argv);
    else if (std::string_view(argv[i]) == "--preset" && std::string_view(argv[i + 1]) == "serve")
      return mpcache::bench::serve_preset_main(argc, argv);
    else if (std::string_view(argv[i]) == "--preset" && std::string_view(argv[i + 1]) == "serve-soak")
      return mpcache::bench::serve_soak_main(argc, argv);
    else if (std::string_view(argv[i]) == "--preset" && std::string_view(argv[i + 1]) == "speculate")
      return mpcache::bench::speculate_preset_main(argc, argv);
    else if (std::string_view(argv[i]) == "--preset" &&
             (std::string_view(argv[i + 1]).starts_with("paper-fig") ||
              std::string_view(argv[i + 1]) == "paper-table8" || std::string_view(argv[i + 1]) == "gpt2-512" ||
              std::string_view(argv[i + 1]) == "long-context"))
      return mpcache::bench::paper_main(argc, argv);
  CLI::App app{"mpcache benchmarks: latency, bytes and rounds per party"};
  std::string preset;
  bool json = false;
  mpcache::bench::Options options;
  app.add_option("--preset", preset, "benchmark preset")
      ->required()
      ->check(CLI::IsMember({"micro", "ops", "paper-table2", "net", "kernels", "decode-batch", "speculate-rows"}));
  std::string link = "none";
  app.add_option("--link", link,
                 "link for model_s: lan (377 MB/s, 0.3 ms RTT), wan (300 Mbit/s, 40 ms), none")
      ->check(CLI::IsMember({"lan", "wan", "none"}));
  app.add_flag("--json", json, "one JSON object per case on stdout");
  app.add_flag("--emulate", options.emulate,
               "also run over the emulated --link and report that time (link_emulated=true); "
               "model_s keeps the unemulated time as compute");
  app.add_option("--repeat", options.repeat, "runs per case; the median latency is reported")
      ->check(CLI::Range(1, 1000));
  app.add_option("--processes", options.processes,
                 "micro, ops, paper-table2: 1 = three parties in this process; 3 = three processes "
                 "over TCP on loopback (the job runner mpcache-party, as `mpcache local` runs them), over the "
                 "emulated --link")
      ->check(CLI::IsMember({1, 3}));
  app.add_option("--protocol", options.protocol,
                 "micro, ops, paper-table2: rss3 (default) or add2 (parties 0 and 1 online, party 2 the dealer; "
                 "bytes are the online parties', offline_bytes the dealer's)")
      ->check(CLI::IsMember({"rss3", "add2"}));
  app.add_option("--case", options.case_name,
                 "micro, ops, paper-table2: run only the case of this name (e.g. sort-1024), to time or profile it alone; "
                 "net: only the rows of one group (throughput-64MiB, rtt-8B, 3proc)");
  app.add_flag("--insecure", options.insecure, "with --processes 3: plain TCP instead of AES-GCM channels");
  app.add_option("--spin-us", options.spin_us,
                 "with --processes 3: parties poll up to this many microseconds before sleeping (0: off; 200-1000: low-latency mode)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--threads", options.threads,
                 "kernels: also time the kernels on a compute pool of this many threads; micro, ops, paper-table2 "
                 "in process: the parties' pool (1: no pool)")
      ->check(CLI::Range(std::size_t{1}, mpcache::ComputePool::max_threads));
  app.add_option("--load", options.load,
                 "keep this many extra threads busy (spinning) while the benchmark runs: latency on a loaded machine")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);
  const mpcache::bench::CpuLoad load(options.load);
  options.link = mpcache::link_named(link);
  try {
    std::vector<CaseResult> rows;
    if (preset == "micro" || preset == "ops" || preset == "paper-table2")
      rows = mpcache::bench::rss3_preset(preset, options);
    if (preset == "net") rows = mpcache::bench::net_preset(options);
    if (preset == "kernels") rows = mpcache::bench::kernels_preset(options);
    if (preset == "decode-batch") rows = mpcache::bench::decode_batch_preset(options);
    if (preset == "speculate-rows") rows = mpcache::bench::speculate_rows_preset(options);
    if (json) {
      for (const auto& r : rows) std::cout << to_json(r, options.link).dump() << "\n";
    } else {
      print_table(rows, options.link);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
