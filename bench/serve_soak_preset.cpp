// Preset `serve-soak`: the private inference service over time. Three
// server processes (`mpcache-party serve`) on loopback; for --minutes,
// --clients client processes at a time (`mpcache-party client`), each with a
// random prompt length, token count and policy, and a random fault or none:
// vanish (leaves after its first token), stall (never sends its prompt),
// garbage (a short share), kill (SIGKILL 20-170 ms after its start), or
// stop and resume (SIGSTOP at the same point, then SIGCONT 700 ms later). Every client that exits 0
// must have exactly the tokens in-process generation gives its prompt; the
// good ones (no fault, or stopped and resumed) must exit 0 or be refused
// "busy"; no client may run past --client-limit-s. Every --sample-s, each
// server's RSS and open descriptors (/proc) and its mesh's open streams and
// cancelled scopes (its --status-file) are sampled. Clients come in bursts
// of --burst-s; after each burst, once its last client is gone, every
// server's descriptors and mesh streams must come back to their idle counts
// (once the model was shared, before any client) within 15 s, or the preset
// fails naming them.
//
//   mpcache-bench --preset serve-soak [--minutes 2] [--clients 4] [--seed 1] [--sample-s 5] [--burst-s 20]
//                                     [--model tools/model/fixture] [--json]
//
// Rows (--json: one object per line): "sample" (t_s, server, rss_kb, fds,
// mesh_streams, cancelled_scopes, sessions_running), "session" (its choices,
// fault, exit status, outcome, seconds), "idle" (after a burst: each server's
// counts, whether they came back, how long it took), "summary".
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
import mpcache.text;
#include "generate_job.hpp"
#include "local_cluster.hpp"
#include "local_service.hpp"
#include "serve_job.hpp"

namespace mpcache::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string soak_text =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of "
    "a wife. Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.";
const std::array<std::size_t, 3> prompt_lengths{8, 24, 48};
const std::array<std::size_t, 2> token_counts{2, 6};
const std::array<const char*, 2> policies{"mpcache", "full"};
const std::array<const char*, 6> faults{"", "vanish", "stall", "garbage", "kill", "stop"};

struct Choice {
  std::size_t prompt = 0, tokens = 0, policy = 0;
  bool operator<(const Choice& o) const {
    return std::tie(prompt, tokens, policy) < std::tie(o.prompt, o.tokens, o.policy);
  }
};

std::string prompt_of(const Choice& c) { return soak_text.substr(0, prompt_lengths[c.prompt]); }

// What in-process generation gives a choice (the clients send no stop tokens).
std::vector<std::uint32_t> expected_tokens(const std::string& model, const Choice& c) {
  jobs::GenerateOptions g;
  g.model_dir = model;
  g.prompt = prompt_of(c);
  g.tokens = token_counts[c.tokens];
  g.tokenizer = "none";
  g.ignore_eos = true;
  g.policy = policies[c.policy];
  g.in_process = true;
  const ModelConfig config = jobs::check_generate_options(g);
  jobs::Prompt prompt;
  const auto tok = jobs::client_prompt(g, config, prompt);
  const auto run = jobs::run_generate_in_process(g, prompt, *tok, {});
  if (!run.ok) throw Error(ErrorCode::protocol, "serve-soak: in-process generation of '" + g.prompt + "' failed");
  return run.out.tokens;
}

long status_kb(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":")) return std::stol(line.substr(field.size() + 1));
  return -1;
}

long open_fds(int pid) {
  std::error_code ec;
  long n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return ec ? -1 : n;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A server's --status-file (serve_job.cpp): -1 in every field until it is there.
struct Status {
  long mesh_streams = -1, cancelled_scopes = -1, sessions_running = -1;
};

Status read_status(const std::string& path) {
  Status s;
  try {
    const json j = json::parse(read_all(path));
    s.mesh_streams = j.at("mesh_streams").get<long>();
    s.cancelled_scopes = j.at("cancelled_scopes").get<long>();
    s.sessions_running = j.at("sessions_running").get<long>();
  } catch (const std::exception&) {
    // not written yet (or, on a slow disk, the old file's rename raced): -1s
  }
  return s;
}

struct Live {
  std::unique_ptr<jobs::BackgroundProcess> process;
  std::size_t index = 0;
  Choice choice;
  std::string fault;
  Clock::time_point start, act_at, resume_at;
  int acted = 0;  // kill/stop: 1 once signalled; stop: 2 once resumed
};

}  // namespace

int serve_soak_main(int argc, char** argv) {
  CLI::App app{"mpcache-bench --preset serve-soak: the service under random clients and client faults, over time"};
  std::string preset, model = std::string(MPCACHE_SOURCE_DIR) + "/tools/model/fixture";
  double minutes = 2, sample_s = 5, client_limit_s = 120, burst_s = 20;
  std::size_t clients = 4;
  std::uint64_t seed = 1;
  bool as_json = false;
  app.add_option("--preset", preset)->required();
  app.add_option("--minutes", minutes, "how long new clients keep coming")->capture_default_str()->check(CLI::Range(0.01, 1440.0));
  app.add_option("--clients", clients, "client processes at a time")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--seed", seed, "the random choices' seed")->capture_default_str();
  app.add_option("--sample-s", sample_s, "seconds between samples of the servers' RSS and descriptors")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  app.add_option("--burst-s", burst_s, "clients come for this long, then none until the servers are idle again")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  app.add_option("--client-limit-s", client_limit_s, "a client still running after this long is a hang")
      ->capture_default_str()->check(CLI::Range(1.0, 3600.0));
  app.add_option("--model", model, "model folder (bytes as tokens)")->capture_default_str();
  app.add_flag("--json", as_json, "one JSON object per row");
  CLI11_PARSE(app, argc, argv);
  auto emit = [&](const json& row) {
    if (as_json) std::cout << row.dump() << std::endl;
  };
  try {
    std::mt19937_64 random(seed);
    const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(random() % n); };
    std::map<Choice, std::vector<std::uint32_t>> expected;
    for (std::size_t p = 0; p < prompt_lengths.size(); ++p)
      for (std::size_t t = 0; t < token_counts.size(); ++t)
        for (std::size_t q = 0; q < policies.size(); ++q) expected[{p, t, q}] = expected_tokens(model, {p, t, q});

    jobs::LocalCluster cluster(false, 120000);
    jobs::add_client_ports(cluster.config_path());
    std::filesystem::create_directory(cluster.file("clients"));
    jobs::write_client_key(cluster.file("clients"), "soak");
    const std::string runner = MPCACHE_PARTY_RUNNER;
    std::vector<std::unique_ptr<jobs::BackgroundProcess>> servers;
    std::vector<std::string> logs;
    for (int i = 0; i < 3; ++i) {
      logs.push_back(cluster.file("server" + std::to_string(i) + ".log"));
      servers.push_back(std::make_unique<jobs::BackgroundProcess>(
          std::vector<std::string>{runner, "serve", "--config", cluster.config_path(), "--id", std::to_string(i),
                                   "--clients", cluster.file("clients"), "--model", model, "--max-sessions", "4",
                                   "--max-queued", "8", "--client-timeout-ms", "3000", "--report",
                                   cluster.file("report" + std::to_string(i) + ".json"), "--status-file",
                                   cluster.file("status" + std::to_string(i) + ".json")},
          logs.back()));
    }
    jobs::wait_servers_ready(servers, logs, std::chrono::minutes(5));
    const auto status_of = [&](int i) { return read_status(cluster.file("status" + std::to_string(i) + ".json")); };
    std::array<long, 3> idle_fds{}, idle_streams{};
    for (int i = 0; i < 3; ++i) idle_fds[i] = open_fds(servers[i]->pid());
    // Idle streams: the most of six status files a second apart (a file
    // written while a receive was between its frame and its next wait counts
    // one fewer; on a loaded host three in a row did, and every burst then
    // looked like a leak of one stream).
    for (int i = 0; i < 3; ++i) idle_streams[i] = -1;
    for (int round = 0, seen = 0; seen < 6; ++round) {
      if (round > 100) throw Error(ErrorCode::io, "serve-soak: the servers wrote no --status-file within 10 s");
      std::array<long, 3> now{};
      for (int i = 0; i < 3; ++i) now[i] = status_of(i).mesh_streams;
      if (std::ranges::find(now, -1) == now.end()) {
        for (int i = 0; i < 3; ++i) idle_streams[i] = std::max(idle_streams[i], now[i]);
        ++seen;
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }

    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(minutes * 60));
    auto next_sample = t0;
    std::vector<Live> live;
    std::size_t started = 0, exact = 0, busy = 0, faulty_ended = 0;
    std::vector<std::string> problems;
    std::map<std::string, std::map<std::string, std::size_t>> outcomes;  // fault -> outcome -> clients
    std::array<long, 3> rss_max{}, fds_max{}, streams_max{}, scopes_max{};
    auto sample = [&] {
      const double t = std::chrono::duration<double>(Clock::now() - t0).count();
      for (int i = 0; i < 3; ++i) {
        const long rss = status_kb(servers[i]->pid(), "VmRSS"), fds = open_fds(servers[i]->pid());
        const Status st = status_of(i);
        rss_max[i] = std::max(rss_max[i], rss);
        fds_max[i] = std::max(fds_max[i], fds);
        streams_max[i] = std::max(streams_max[i], st.mesh_streams);
        scopes_max[i] = std::max(scopes_max[i], st.cancelled_scopes);
        emit({{"row", "sample"}, {"t_s", t}, {"server", i}, {"rss_kb", rss}, {"fds", fds},
              {"mesh_streams", st.mesh_streams}, {"cancelled_scopes", st.cancelled_scopes},
              {"sessions_running", st.sessions_running}});
      }
    };
    auto sample_when_due = [&] {
      if (Clock::now() < next_sample) return;
      sample();
      next_sample += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sample_s));
    };
    // After a burst (every client gone): each server's descriptors and mesh
    // streams come back to their idle counts, and no session runs; the
    // servers close a link once its session or refusal is over, and a
    // status file is a second old at most. 15 s, then it is a problem.
    std::size_t bursts = 0, bursts_back_to_idle = 0;
    std::array<long, 3> end_fds{}, end_streams{};
    auto idle_check = [&] {
      ++bursts;
      const auto began = Clock::now(), settle = began + std::chrono::seconds(15);
      bool idle = false;
      for (;;) {
        idle = true;
        for (int i = 0; i < 3; ++i) {
          end_fds[i] = open_fds(servers[i]->pid());
          const Status st = status_of(i);
          end_streams[i] = st.mesh_streams;
          idle = idle && end_fds[i] == idle_fds[i] && end_streams[i] == idle_streams[i] && st.sessions_running == 0;
        }
        if (idle || Clock::now() > settle) break;
        sample_when_due();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      const double t = std::chrono::duration<double>(Clock::now() - t0).count();
      const double settle_s = std::chrono::duration<double>(Clock::now() - began).count();
      for (int i = 0; i < 3; ++i)
        emit({{"row", "idle"}, {"t_s", t}, {"burst", bursts}, {"server", i}, {"fds", end_fds[i]},
              {"idle_fds", idle_fds[i]}, {"mesh_streams", end_streams[i]}, {"idle_mesh_streams", idle_streams[i]},
              {"back_to_idle", idle}, {"settle_s", settle_s}});
      if (idle) {
        ++bursts_back_to_idle;
        return;
      }
      for (int i = 0; i < 3; ++i)
        if (end_fds[i] != idle_fds[i] || end_streams[i] != idle_streams[i])
          problems.push_back("after burst " + std::to_string(bursts) + ", server " + std::to_string(i) + " holds " +
                             std::to_string(end_fds[i]) + " descriptors and " + std::to_string(end_streams[i]) +
                             " mesh streams, " + std::to_string(idle_fds[i]) + " and " +
                             std::to_string(idle_streams[i]) + " before the first client");
    };
    auto burst_end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(burst_s));
    while (Clock::now() < end || !live.empty()) {
      for (int i = 0; i < 3; ++i)
        if (!servers[i]->running()) throw Error(ErrorCode::network, "serve-soak: server " + std::to_string(i) + " exited:\n" + read_all(logs[i]));
      while (Clock::now() < std::min(end, burst_end) && live.size() < clients) {
        Live l;
        l.index = started++;
        l.choice = {pick(prompt_lengths.size()), pick(token_counts.size()), pick(policies.size())};
        // Half the clients are good; the rest spread over the faults.
        l.fault = pick(2) == 0 ? "" : faults[1 + pick(faults.size() - 1)];
        std::vector<std::string> args{runner, "client", "--servers", cluster.config_path(), "--key",
                                      cluster.file("clients/soak.key"), "--prompt", prompt_of(l.choice), "--tokens",
                                      std::to_string(token_counts[l.choice.tokens]), "--policy",
                                      policies[l.choice.policy], "--timeout-ms", "30000", "--json",
                                      cluster.file("client" + std::to_string(l.index) + ".json")};
        if (l.fault == "vanish" || l.fault == "stall" || l.fault == "garbage") {
          args.push_back("--fault");
          args.push_back(l.fault);
        }
        l.start = Clock::now();
        // Early enough to land mid-session on a small model (a fixture
        // client starts, connects and has its tokens in about 0.1 s).
        l.act_at = l.start + std::chrono::milliseconds(20 + pick(150));
        l.process = std::make_unique<jobs::BackgroundProcess>(
            args, cluster.file("client" + std::to_string(l.index) + ".log"));
        live.push_back(std::move(l));
      }
      const auto now = Clock::now();
      for (auto it = live.begin(); it != live.end();) {
        Live& l = *it;
        if (l.fault == "kill" && l.acted == 0 && now >= l.act_at) {
          l.process->signal(SIGKILL);
          l.acted = 1;
        } else if (l.fault == "stop" && l.acted == 0 && now >= l.act_at) {
          l.process->signal(SIGSTOP);
          l.resume_at = now + std::chrono::milliseconds(700);
          l.acted = 1;
        } else if (l.fault == "stop" && l.acted == 1 && now >= l.resume_at) {
          l.process->signal(SIGCONT);
          l.acted = 2;
        }
        const double seconds = std::chrono::duration<double>(now - l.start).count();
        if (l.process->running()) {
          if (seconds <= client_limit_s) {
            ++it;
            continue;
          }
          problems.push_back("client " + std::to_string(l.index) + " (fault '" + l.fault + "') still ran after " +
                             std::to_string(client_limit_s) + " s");
        }
        const int status = l.process->wait(0);  // kills a hung one
        const std::string out_path = cluster.file("client" + std::to_string(l.index) + ".json");
        const std::string log = read_all(cluster.file("client" + std::to_string(l.index) + ".log"));
        std::string outcome;
        const bool good = l.fault.empty() || l.fault == "stop";
        if (status == 0) {
          const auto tokens = json::parse(read_all(out_path))["tokens"].get<std::vector<std::uint32_t>>();
          outcome = tokens == expected[l.choice] ? "exact" : "mismatch";
          if (outcome == "exact") ++exact;
          else problems.push_back("client " + std::to_string(l.index) + " (fault '" + l.fault + "') got other tokens than in-process generation");
        } else if (log.find("busy") != std::string::npos) {
          outcome = "refused busy";
          ++busy;
        } else if (good) {
          outcome = "failed";
          problems.push_back("good client " + std::to_string(l.index) + " failed (status " + std::to_string(status) + "): " + log);
        } else {
          outcome = "fault ended it";
          ++faulty_ended;
        }
        ++outcomes[l.fault.empty() ? "none" : l.fault][outcome];
        emit({{"row", "session"}, {"client", l.index}, {"prompt_bytes", prompt_lengths[l.choice.prompt]},
              {"tokens", token_counts[l.choice.tokens]}, {"policy", policies[l.choice.policy]},
              {"fault", l.fault.empty() ? "none" : l.fault}, {"status", status}, {"outcome", outcome},
              {"seconds", seconds}});
        it = live.erase(it);
      }
      if (live.empty() && Clock::now() >= burst_end && Clock::now() < end) {  // between two bursts
        idle_check();
        burst_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(burst_s));
      }
      sample_when_due();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    idle_check();  // the last burst's
    sample();
    for (auto& s : servers) s->signal(SIGTERM);
    std::array<long, 3> peak{};
    for (int i = 0; i < 3; ++i) {
      if (servers[i]->wait(60000) != 0) problems.push_back("server " + std::to_string(i) + " did not stop cleanly");
      const std::string report = read_all(cluster.file("report" + std::to_string(i) + ".json"));
      peak[i] = report.empty() ? -1 : json::parse(report).value("peak_rss_kb", -1L);
    }
    const json summary = {{"row", "summary"},
                          {"minutes", minutes},
                          {"clients_started", started},
                          {"exact", exact},
                          {"refused_busy", busy},
                          {"ended_by_their_fault", faulty_ended},
                          {"outcomes", outcomes},
                          {"problems", problems},
                          {"bursts", bursts},
                          {"bursts_back_to_idle", bursts_back_to_idle},
                          {"idle_fds", idle_fds},
                          {"end_fds", end_fds},
                          {"max_fds", fds_max},
                          {"idle_mesh_streams", idle_streams},
                          {"end_mesh_streams", end_streams},
                          {"max_mesh_streams", streams_max},
                          {"max_cancelled_scopes", scopes_max},
                          {"max_rss_kb", rss_max},
                          {"peak_rss_kb", peak}};
    emit(summary);
    if (!as_json)
      std::printf("serve-soak %.2f min: %zu clients, %zu exact, %zu refused busy, %zu ended by their fault; "
                  "%zu bursts, %zu back to idle; descriptors idle %ld/%ld/%ld, at the end %ld/%ld/%ld, max "
                  "%ld/%ld/%ld; mesh streams idle %ld/%ld/%ld, max %ld/%ld/%ld; RSS max %ld/%ld/%ld KB\n",
                  minutes, started, exact, busy, faulty_ended, bursts, bursts_back_to_idle, idle_fds[0], idle_fds[1],
                  idle_fds[2], end_fds[0], end_fds[1], end_fds[2], fds_max[0], fds_max[1], fds_max[2],
                  idle_streams[0], idle_streams[1], idle_streams[2], streams_max[0], streams_max[1], streams_max[2],
                  rss_max[0], rss_max[1], rss_max[2]);
    for (const auto& p : problems) std::fprintf(stderr, "serve-soak: %s\n", p.c_str());
    return problems.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace mpcache::bench
