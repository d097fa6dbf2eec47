// Preset `serve`: the private inference service as it runs. Three server
// processes (`mpcache-party serve`, the same code as `mpcache serve`) on
// loopback share our model once; then batches of 1, 2, 4 and 8 client
// processes (`mpcache-party client`) ask at once, each for its own prompt,
// over the servers' mesh without and with the emulated LAN (the clients'
// channels are not emulated). Per batch: tokens per second of the whole
// service, each client's time to first token, per-token latency (p50, p99),
// bytes and rounds per token at the servers, the servers' peak RSS, and the
// throughput against the batch of one in the same run. Each link runs twice:
// with continuous batching (the servers' --max-batch 8: sessions in their
// decode phase step together) and without (--max-batch 1: each session its
// own steps, interleaved), so that the batched rows have their baseline
// beside them; rows carry the mean batch (sessions per batched step).
// Lists of the servers' --tick-us, --lanes (batched steps in flight at
// once) and --threads (--server-threads) run each value with fresh servers
// in the same run, and the rows say which.
// --speculate 0,4 runs each batch once per K on the same servers (its
// clients speculate K tokens a step with --draft, K = 0 beside it);
// --client-link emulates the clients' own links too (`same`: the mesh's),
// which a speculating client, on each step's critical path, pays per step.
//
//   mpcache-bench --preset serve [--clients 1,2,4,8] [--links none,lan] [--max-batch 8,1] [--tokens 8]
//                                [--lanes 1] [--tick-us 200] [--server-threads 1]
//                                [--speculate 0] [--draft lookup] [--client-link none] [--prompts FILE]
//                                [--comparisons WAY] [--truncation WAY] [--json]
//
// Under dcf+offline the servers' stores of DCF keys are refilled between
// batched steps (serve::StoreRefill), and under exact+offline truncation
// pairs are made there: bytes and rounds per token are the online ones, and
// the refills' bytes and time are reported beside them. Unbatched servers
// (the baseline) have no refills: dcf keys dealt inline, exact truncation.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "cluster_config.hpp"
#include "protocol_mode_flags.hpp"
#include "local_cluster.hpp"
#include "serve_job.hpp"
#include "local_service.hpp"

namespace mpcache::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string austen =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of "
    "a wife. Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to "
    "unite some of the best blessings of existence.";

struct StepLine {
  std::uint64_t session = 0, step = 0, rounds = 0, bytes = 0;  // online
  std::uint64_t offline_bytes = 0;  // dcf+offline, exact+offline: the refills so far
  double offline_s = 0;
};

std::vector<StepLine> read_steps(const std::string& path) {
  std::vector<StepLine> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = json::parse(line);
    out.push_back({j["session"], j["step"], j["rounds"], j["bytes"], j.value("offline_bytes", std::uint64_t{0}),
                   j.value("offline_s", 0.0)});
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())))];
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ',');) out.push_back(std::stoi(item));
  return out;
}

struct Settings {
  std::string model;
  std::size_t tokens = 8;
  std::size_t prompt_bytes = 64;
  std::vector<int> clients = {1, 2, 4, 8};
  jobs::ProtocolModeFlags mode;  // the servers' --truncation, --comparisons and budgets
  int batch_timeout_s = 600;            // a batch's clients must all finish within this
  std::vector<int> speculate = {0};     // the clients' --speculate, each on the same servers
  std::string draft = "lookup";         // the clients' --draft
  std::string client_link = "none";     // the clients' emulated link; "same": the mesh's
  std::vector<std::string> prompts;     // --prompts FILE: client c's is line c (cycled); none: slices of `austen`
};

// Three servers over `link`, then one batch per client count.
std::vector<json> run_link(const Settings& s, const std::string& link, int max_batch, int tick_us, int threads, int lanes) {
  // A store is refilled between batched steps: unbatched servers, the
  // baseline, deal the same DCF keys inline.
  jobs::ProtocolModeFlags servers_mode = s.mode;
  if (max_batch == 1) {
    const ProtocolMode mode = s.mode.mode();
    if (mode.comparison_store()) servers_mode.comparisons = {comparisons_name(ComparisonMode::dcf)};
    if (mode.truncation_pairs()) servers_mode.truncation = truncation_name(TruncationMode::exact);
  }
  const std::string comparisons = servers_mode.comparisons.front(), truncation = servers_mode.truncation;
  jobs::LocalCluster cluster(false, 120000);
  jobs::add_client_ports(cluster.config_path());
  std::filesystem::create_directory(cluster.file("clients"));
  jobs::write_client_key(cluster.file("clients"), "bench");
  const std::string runner = MPCACHE_PARTY_RUNNER;
  std::vector<std::unique_ptr<jobs::BackgroundProcess>> servers;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> args{runner, "serve", "--config", cluster.config_path(), "--id", std::to_string(i),
                                  "--clients", cluster.file("clients"), "--model", s.model, "--link", link,
                                  "--max-sessions", "8", "--max-batch", std::to_string(max_batch), "--max-queued", "16",
                                  "--tick-us", std::to_string(tick_us), "--threads", std::to_string(threads),
                                  "--lanes", std::to_string(lanes), "--steps",
                                  cluster.file("steps" + std::to_string(i) + ".jsonl"), "--report",
                                  cluster.file("report" + std::to_string(i) + ".json")};
    const auto mode_args = servers_mode.args();
    args.insert(args.end(), mode_args.begin(), mode_args.end());
    servers.push_back(std::make_unique<jobs::BackgroundProcess>(args, cluster.file("server" + std::to_string(i) + ".log")));
  }
  std::vector<std::string> logs;
  for (int i = 0; i < 3; ++i) logs.push_back(cluster.file("server" + std::to_string(i) + ".log"));
  auto server_log = [&](int i) {
    std::ifstream in(logs[i]);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  try {
    jobs::wait_servers_ready(servers, logs, std::chrono::minutes(5));
  } catch (const Error& e) {
    throw Error(e.code(), std::string("serve preset: ") + e.what());
  }

  // One batch: `n` clients at once, each its own slice of the text.
  const std::string client_link = s.client_link == "same" ? link : s.client_link;
  auto batch = [&](int n, std::size_t tokens, const std::string& tag, int speculate = 0) {
    std::vector<std::unique_ptr<jobs::BackgroundProcess>> clients;
    const auto t0 = Clock::now();
    for (int c = 0; c < n; ++c) {
      const std::string prompt = s.prompts.empty() ? austen.substr((7 * c) % 40, s.prompt_bytes)
                                                   : s.prompts[std::size_t(c) % s.prompts.size()].substr(0, s.prompt_bytes);
      std::vector<std::string> args{runner, "client", "--servers", cluster.config_path(), "--key",
                                    cluster.file("clients/bench.key"), "--prompt", prompt, "--tokens",
                                    std::to_string(tokens), "--json", cluster.file(tag + std::to_string(c) + ".json"),
                                    "--link", client_link};
      if (speculate > 0)
        args.insert(args.end(), {"--speculate", std::to_string(speculate), "--draft", s.draft});
      clients.push_back(std::make_unique<jobs::BackgroundProcess>(args, cluster.file(tag + std::to_string(c) + ".log")));
    }
    std::vector<json> reports;
    const auto deadline = t0 + std::chrono::seconds(s.batch_timeout_s);
    for (int c = 0; c < n; ++c) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (clients[c]->wait(int(std::max<long long>(left, 0))) != 0) {
        std::ifstream in(cluster.file(tag + std::to_string(c) + ".log"));
        const std::string log(std::istreambuf_iterator<char>(in), {});
        if (Clock::now() >= deadline)
          throw Error(ErrorCode::timeout, "serve preset: " + std::to_string(n) + (n == 1 ? " client" : " clients") + " of " +
                                              std::to_string(tokens) + " tokens did not finish within --batch-timeout-s " +
                                              std::to_string(s.batch_timeout_s) + " (client " + std::to_string(c) +
                                              " was stopped)" + (log.empty() ? "" : ": " + log));
        throw Error(ErrorCode::network, "serve preset: client " + std::to_string(c) + " failed: " + log);
      }
      std::ifstream in(cluster.file(tag + std::to_string(c) + ".json"));
      reports.push_back(json::parse(in));
    }
    return std::pair{std::chrono::duration<double>(Clock::now() - t0).count(), reports};
  };
  (void)batch(1, 2, "warm");  // first-touch costs out of the way

  std::vector<json> rows;
  std::map<int, std::vector<json>> plain_tokens;  // clients -> each client's tokens at K = 0 (same prompts)
  for (int n : s.clients)
  for (int spec : s.speculate) {
    if (spec > 0 && max_batch < 2) continue;  // speculation runs in the batched steps
    std::array<std::size_t, 3> lines_before{};
    for (int i = 0; i < 3; ++i) lines_before[i] = read_steps(cluster.file("steps" + std::to_string(i) + ".jsonl")).size();
    const auto [seconds, reports] = batch(n, s.tokens, "c" + std::to_string(n) + "-k" + std::to_string(spec) + "-", spec);
    // Rows print once the servers stop (they add the servers' peak RSS):
    // on a long run this line says how far it got.
    std::fprintf(stderr, "serve preset: link %s, %d %s, speculate %d: done in %.1f s\n", link.c_str(), n,
                 n == 1 ? "client" : "clients", spec, seconds);
    std::size_t total_tokens = 0, verified_steps = 0, verified_tokens = 0;
    std::vector<double> ttft, per_token;
    for (const auto& r : reports) {
      total_tokens += r["tokens"].size();
      ttft.push_back(r["seconds_to_first_token"]);
      for (double t : r["token_seconds"]) per_token.push_back(t);
      for (std::size_t a : r.value("accepted", std::vector<std::size_t>{})) {
        ++verified_steps;
        verified_tokens += a + 1;
      }
    }
    double token_sum = 0;
    for (double t : per_token) token_sum += t;
    // Greedy speculation must give K = 0's text: each client's tokens, same prompt.
    std::vector<json> tokens_now;
    for (const auto& r : reports) tokens_now.push_back(r["tokens"]);
    if (spec == 0) plain_tokens[n] = tokens_now;
    const bool compared = spec > 0 && plain_tokens.contains(n);
    const bool identical = compared && plain_tokens[n] == tokens_now;
    // Servers' traffic in the batch: bytes per token (the busiest server),
    // and server 0's rounds per decoded token (clock steps within a
    // session; sessions that run at once advance each other's clocks).
    // Online and refill bytes each merged across the servers (merge_party_costs).
    std::vector<PartyCost> online, refills;
    double offline_s = 0;  // server 0's refills in this batch
    double rounds_sum = 0;
    std::size_t rounds_n = 0;
    std::set<std::uint64_t> step_clocks;  // server 0's batched steps: one clock per step
    std::set<std::pair<std::uint64_t, std::uint64_t>> session_steps;  // (clock, session): a session's tokens of one step
    for (int i = 0; i < 3; ++i) {
      const auto lines = read_steps(cluster.file("steps" + std::to_string(i) + ".jsonl"));
      if (lines.size() <= lines_before[i] || lines_before[i] == 0) continue;
      online.push_back({.bytes_sent = lines.back().bytes - lines[lines_before[i] - 1].bytes});
      refills.push_back({.bytes_sent = lines.back().offline_bytes - lines[lines_before[i] - 1].offline_bytes});
      if (i != 0) continue;
      offline_s = lines.back().offline_s - lines[lines_before[i] - 1].offline_s;
      std::map<std::uint64_t, std::vector<StepLine>> by_session;
      for (std::size_t k = lines_before[i]; k < lines.size(); ++k) by_session[lines[k].session].push_back(lines[k]);
      for (const auto& [session, steps] : by_session)
        for (std::size_t k = 1; k < steps.size(); ++k, ++rounds_n) {
          rounds_sum += double(steps[k].rounds - steps[k - 1].rounds);
          step_clocks.insert(steps[k].rounds);
          session_steps.emplace(steps[k].rounds, session);
        }
    }
    const std::uint64_t bytes_max = merge_party_costs(online).bytes_max_party;
    const std::uint64_t offline_bytes_max = merge_party_costs(refills).bytes_max_party;
    rows.push_back({{"preset", "serve"},
                    {"link", link},
                    {"max_batch", max_batch},
                    {"comparisons", comparisons},
                    {"truncation", truncation},
                    {"tick_us", tick_us},
                    {"server_threads", threads},
                    {"lanes", lanes},
                    {"mean_batch", max_batch > 1 && !step_clocks.empty()
                                       ? double(session_steps.size()) / double(step_clocks.size())
                                       : 1.0},
                    {"clients", n},
                    {"speculate", spec},
                    {"draft", spec > 0 ? s.draft : "none"},
                    {"client_link", client_link},
                    {"tokens_per_step", verified_steps ? double(verified_tokens) / double(verified_steps) : 1.0},
                    {"identical_to_k0", compared ? json(identical) : json(nullptr)},
                    {"token_mean_s", per_token.empty() ? 0.0 : token_sum / double(per_token.size())},
                    {"tokens_per_client", s.tokens},
                    {"prompt_bytes", s.prompt_bytes},
                    {"wall_s", seconds},
                    {"tokens_per_s", double(total_tokens) / seconds},
                    {"ttft_p50_s", percentile(ttft, 0.5)},
                    {"ttft_max_s", percentile(ttft, 1.0)},
                    {"token_p50_s", percentile(per_token, 0.5)},
                    {"token_p99_s", percentile(per_token, 0.99)},
                    {"bytes_per_token_max_server", total_tokens ? double(bytes_max) / double(total_tokens) : 0.0},
                    {"bytes_per_request_max_server", double(bytes_max) / n},
                    {"rounds_per_decoded_token", rounds_n ? rounds_sum / double(rounds_n) : 0.0},
                    {"offline_bytes_per_token_max_server", total_tokens ? double(offline_bytes_max) / double(total_tokens) : 0.0},
                    {"offline_s_server0", offline_s}});
  }
  for (auto& p : servers) p->signal(SIGTERM);
  std::vector<json> reports;
  for (int i = 0; i < 3; ++i) {
    const int status = servers[i]->wait(120000);
    std::ifstream in(cluster.file("report" + std::to_string(i) + ".json"));
    if (status != 0 || !in) throw Error(ErrorCode::network, "serve preset: server " + std::to_string(i) + " ended with " +
                                                                std::to_string(status) + ": " + server_log(i));
    reports.push_back(json::parse(in));
  }
  // Speculating against K = 0, same servers, same clients, same run.
  for (auto& r : rows)
    for (const auto& base : rows)
      if (base["speculate"] == 0 && base["clients"] == r["clients"] && base["token_mean_s"].get<double>() > 0)
        r["token_mean_vs_k0"] = r["token_mean_s"].get<double>() / base["token_mean_s"].get<double>();
  const double one = rows.empty() ? 0.0 : rows.front()["tokens_per_s"].get<double>();
  for (auto& r : rows) {
    r["throughput_vs_1_client"] = one > 0 ? r["tokens_per_s"].get<double>() / one : 0.0;
    r["server_peak_rss_mb"] = json::array();
    r["setup_bytes_per_server"] = json::array();
    double rss_max = 0, setup_max = 0;
    for (const auto& rep : reports) {
      r["server_peak_rss_mb"].push_back(rep["peak_rss_kb"].get<double>() / 1024.0);
      r["setup_bytes_per_server"].push_back(rep["setup_bytes_sent"]);
      rss_max = std::max(rss_max, rep["peak_rss_kb"].get<double>() / 1024.0);
      setup_max = std::max(setup_max, rep["setup_bytes_sent"].get<double>());
    }
    // The busiest server's, as scalars for tables: the weights cross once
    // (setup), a request moves only its own shares.
    r["server_peak_rss_mb_max"] = rss_max;
    r["setup_bytes_max_server"] = setup_max;
  }
  return rows;
}

}  // namespace

int serve_preset_main(int argc, char** argv) {
  CLI::App app{"mpcache-bench --preset serve: the private inference service, 3 server processes and N clients"};
  std::string preset, clients = "1,2,4,8", links = "none,lan", batches = "8,1", ticks = "200", threads = "1", lanes = "1";
  bool as_json = false;
  Settings s;
  s.model = std::string(MPCACHE_SOURCE_DIR) + "/tools/model/austen-byte";
  app.add_option("--preset", preset)->required();
  app.add_option("--clients", clients, "concurrent clients per batch, comma-separated")->capture_default_str();
  app.add_option("--links", links, "the servers' mesh links, comma-separated (none, lan, wan)")->capture_default_str();
  app.add_option("--max-batch", batches, "the servers' --max-batch, comma-separated (1: no batching)")->capture_default_str();
  app.add_option("--tick-us", ticks,
                 "the servers' --tick-us, comma-separated (0: a tick of the event loop runs all ready work)")
      ->capture_default_str();
  app.add_option("--server-threads", threads,
                 "the servers' --threads (each server's compute pool, counting its loop's thread), comma-separated")
      ->capture_default_str();
  app.add_option("--lanes", lanes,
                 "the servers' --lanes (batched steps in flight at once), comma-separated; 1: one step at a time")
      ->capture_default_str();
  app.add_option("--tokens", s.tokens, "tokens per client")->capture_default_str();
  std::string speculate = "0";
  app.add_option("--speculate", speculate,
                 "the clients' --speculate, comma-separated: each K runs on the same servers (0: none)")
      ->capture_default_str();
  app.add_option("--draft", s.draft, "the speculating clients' --draft (lookup, ngram:FILE or model:DIR)")->capture_default_str();
  std::string prompts_file;
  app.add_option("--prompts", prompts_file, "client c's prompt: the first --prompt-bytes of line c of this file (cycled)");
  app.add_option("--client-link", s.client_link, "the clients' emulated link (none, lan, wan, ...; same: the mesh's)")
      ->capture_default_str();
  app.add_option("--prompt-bytes", s.prompt_bytes, "prompt length per client")->capture_default_str()->check(CLI::Range(1, 150));
  app.add_option("--model", s.model, "model folder (bytes as tokens)")->capture_default_str();
  app.add_option("--batch-timeout-s", s.batch_timeout_s,
                 "each batch of clients must finish within this (a GPT-2-124M-shaped model needs more than the default)")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  // The servers' mode flags (offline stores and pairs refill between
  // batched steps: unbatched servers, the baseline, deal inline).
  jobs::add_protocol_mode_options(app, s.mode);
  app.add_flag("--json", as_json, "one JSON object per row");
  CLI11_PARSE(app, argc, argv);
  try {
    s.clients = parse_list(clients);
    s.speculate = parse_list(speculate);
    if (!prompts_file.empty()) {
      std::ifstream in(prompts_file);
      if (!in) throw Error(ErrorCode::invalid_argument, "--prompts: cannot read '" + prompts_file + "'");
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) s.prompts.push_back(line);
      if (s.prompts.empty()) throw Error(ErrorCode::invalid_argument, "--prompts: '" + prompts_file + "' has no prompt");
    }
    std::stringstream ls(links);
    for (std::string link; std::getline(ls, link, ',');) {
      std::vector<json> rows;
      for (int server_threads : parse_list(threads))
        for (int tick_us : parse_list(ticks))
          for (int lane_count : parse_list(lanes))
            for (int max_batch : parse_list(batches))
              for (auto& row : run_link(s, link, max_batch, tick_us, server_threads, lane_count))
                rows.push_back(std::move(row));
      // Batched against unbatched, same link, clients, ticks, threads and lanes, same run.
      for (auto& row : rows)
        for (const auto& base : rows)
          if (base["max_batch"] == 1 && base["clients"] == row["clients"] && base["tick_us"] == row["tick_us"] &&
              base["server_threads"] == row["server_threads"] && base["lanes"] == row["lanes"])
            row["throughput_vs_unbatched"] = row["tokens_per_s"].get<double>() / base["tokens_per_s"].get<double>();
      for (const auto& row : rows) {
        if (as_json) {
          std::cout << row.dump() << std::endl;
        } else {
          std::printf("serve link %-5s lanes %d threads %d tick %4d us max-batch %d clients %2d: %7.2f tok/s (x%.2f of 1 client), mean batch %.2f, ttft p50 "
                      "%.3f s, token p50 %.3f s p99 %.3f s, %.0f bytes/token, %.1f rounds/token\n",
                      link.c_str(), row["lanes"].get<int>(), row["server_threads"].get<int>(), row["tick_us"].get<int>(), row["max_batch"].get<int>(), row["clients"].get<int>(), row["tokens_per_s"].get<double>(),
                      row["throughput_vs_1_client"].get<double>(), row["mean_batch"].get<double>(), row["ttft_p50_s"].get<double>(),
                      row["token_p50_s"].get<double>(), row["token_p99_s"].get<double>(),
                      row["bytes_per_token_max_server"].get<double>(), row["rounds_per_decoded_token"].get<double>());
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace mpcache::bench
