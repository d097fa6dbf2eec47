// One party of a multi-process job, and the local launcher of three (see
// party_job.hpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <iostream>
#include <thread>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "cluster_config.hpp"
#include "cluster_connect.hpp"
#include "cost_rows.hpp"
#include "demo_job.hpp"
#include "local_cluster.hpp"
#include "op_cases.hpp"
#include "party_job.hpp"

namespace mpcache::jobs {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Recorder {
  Endpoint* endpoint = nullptr;
  SectionMark current;
  std::vector<std::pair<std::string, SectionMark>> cases;  // each run of each case
  std::string fault;
  std::uint64_t barriers = 0;
  // Starts the timed section. A barrier first (one tiny message to and from
  // every peer, not counted) so that a party that finished the untimed set-up
  // early does not time its wait for the others.
  Task<void> begin() {
    if (fault == "exit") std::_Exit(3);  // dies mid-protocol: peers are waiting on it
    if (fault == "silent") std::this_thread::sleep_for(std::chrono::hours(1));
    const StreamId stream = (StreamId{0xBA} << 56) | ++barriers;
    for (PartyId p = 0; p < endpoint->parties(); ++p)
      if (p != endpoint->id()) endpoint->send(p, stream, std::vector<std::byte>(1));
    for (PartyId p = 0; p < endpoint->parties(); ++p)
      if (p != endpoint->id()) (void)co_await endpoint->recv(p, stream);
    current.begin(*endpoint);
  }
  void end(const std::string& name) {
    current.end(*endpoint);
    cases.emplace_back(name, current);
  }
};

// A catalogue case's timed section, recorded by the Recorder.
class RecorderClock final : public CaseClock {
 public:
  RecorderClock(Recorder& rec, std::string name) : rec_(rec), name_(std::move(name)) {}
  Task<void> begin() override { co_await rec_.begin(); }
  void end() override { rec_.end(name_); }

 private:
  Recorder& rec_;
  std::string name_;
};

// `mpcache demo`, one party of it (the same data and check).
Task<bool> demo_job(Rss3& p, PartyId id, Recorder& rec) {
  const DemoData data = demo_data(DemoOptions{});
  co_await rec.begin();
  auto opened = co_await demo_party(p, id, data);
  rec.end("demo");
  if (id != 0) co_return !opened.has_value();
  co_return demo_check(data, *opened).ok();
}

// `demo`, or the benchmark cases of a preset (micro, ops, paper-table2) or
// one of them by name (`matvec` = matvec-1x1024x1024); throws naming the
// valid jobs otherwise.
std::vector<OpCase> job_cases(const std::string& job, const std::string& link) {
  if (job == "demo") return {OpCase{"demo", 0, "", {}}};  // runs demo_job, not a case body
  return cases_named(job == "matvec" ? "matvec-1x1024x1024" : job, planning_link(link_named(link)));
}

}  // namespace

const char* const job_names_help =
    "demo, a benchmark preset (micro, ops, paper-table2) or one of its cases (mul-1M, "
    "fixed-mul-1M, matvec, compare-100k, softmax-1024, table2-cluster, ...)";

void add_party_options(CLI::App& command, PartyJob& job) {
  command.add_option("--config", job.config, "cluster config (JSON)")->required();
  command.add_option("--id", job.id, "this party's id (index in the config)")->required();
  add_network_options(command, job.network);
  command.add_option("--job", job.job, job_names_help);
  command.add_option("--report", job.report, "write the JSON report here (default: stdout)");
  command.add_option("--repeat", job.repeat, "runs per case (median reported)")->check(CLI::Range(1, 100));
  command.add_option("--fault", job.fault, "tests: exit or silent in the middle of the job")
      ->check(CLI::IsMember({"exit", "silent"}));
  add_threads_option(command, job.threads);
}

void add_threads_option(CLI::App& command, std::size_t& threads) {
  command.add_option("--threads", threads,
                     "threads of this party's compute pool for big matmuls and element-wise work (1: none)")
      ->check(CLI::Range(std::size_t{1}, ComputePool::max_threads));
}

std::vector<std::string> party_args(const PartyJob& job) {
  std::vector<std::string> args = {"--config", job.config, "--id", std::to_string(job.id), "--job", job.job,
                                   "--repeat", std::to_string(job.repeat)};
  if (!job.report.empty()) args.insert(args.end(), {"--report", job.report});
  const auto network_args = job.network.args();
  args.insert(args.end(), network_args.begin(), network_args.end());
  if (!job.fault.empty()) args.insert(args.end(), {"--fault", job.fault});
  if (job.threads > 1) args.insert(args.end(), {"--threads", std::to_string(job.threads)});
  return args;
}

int party_main(int argc, char** argv) {
  CLI::App app{"mpcache-party: one party of a multi-process job over TCP (src/jobs/party_job.hpp); "
               "started by run_local_job"};
  PartyJob job;
  add_party_options(app, job);
  CLI11_PARSE(app, argc, argv);
  return run_party(job);
}

int run_party(const PartyJob& o) {
  json report = {{"party", o.id}, {"job", o.job}, {"ok", false}, {"link", o.network.link},
                 {"link_emulated", o.network.link != "none"}, {"encrypted", !o.network.insecure}};
  auto emit = [&] {
    const std::string text = report.dump() + "\n";
    if (o.report.empty()) {
      std::cout << text << std::flush;
    } else {
      write_text_file(o.report, text, false);
    }
  };
  try {
    const auto cases = job_cases(o.job, o.network.link);
    const ClusterConfig config = read_cluster_config(o.config);
    if (o.id >= config.parties.size())
      throw Error(ErrorCode::bad_party, "party " + std::to_string(o.id) + " is not in " + o.config);
    Scheduler scheduler;
    Endpoint endpoint(scheduler, o.id, config.parties.size());
    ClusterConnection connection(scheduler, endpoint, config, o.config, o.id, o.network, config.timeout_ms);
    TcpTransport& transport = connection.transport();
    report["transport"] = endpoint.transport()->name();
    report["threads"] = o.threads;
    std::optional<ComputePool> pool;  // outlives the party below
    if (o.threads > 1) pool.emplace(o.threads);
    report["backend"] = transport.backend();
    if (!transport.fallback_reason().empty()) report["fallback_reason"] = transport.fallback_reason();
    Recorder rec;
    rec.endpoint = &endpoint;
    rec.fault = o.fault;
    bool ok = true;
    const auto t0 = Clock::now();
    auto job = [&]() -> Task<void> {
      // Probabilistic truncation, as the op cases in one process (bench/three_party.hpp).
      auto party = co_await Rss3Party::setup(endpoint, {.exact_truncation = false, .pool = pool ? &*pool : nullptr});
      Rss3 p = party->session();
      for (int r = 0; r < o.repeat; ++r)
        for (const auto& c : cases) {
          RecorderClock clock(rec, c.name);
          const bool good = c.name == "demo" ? co_await demo_job(p, o.id, rec)
                                             : co_await c.run(p, o.id, clock);
          ok = ok && good;
        }
    };
    try {
      sync_wait(scheduler, job());
    } catch (const std::exception& e) {
      endpoint.abort(e.what());  // the peers learn why before the transport closes
      throw;
    }
    transport.shutdown();
    report["wall_s"] = std::chrono::duration<double>(Clock::now() - t0).count();
    report["wire_bytes_sent"] = transport.wire_bytes_sent();
    json jc = json::array();
    for (const auto& job_case : cases) {
      const std::string& name = job_case.name;
      std::vector<double> times;
      const SectionMark* first = nullptr;
      for (const auto& [case_name, mark] : rec.cases)
        if (case_name == name) {
          times.push_back(mark.seconds());
          if (!first) first = &mark;
        }
      std::sort(times.begin(), times.end());
      jc.push_back({{"case", name},
                    {"latency_s", times[times.size() / 2]},
                    {"bytes_sent", first->costs().payload_bytes_sent()},
                    {"messages_sent", first->costs().messages_sent()},
                    {"clock_before", first->before.rounds},  // Lamport clocks
                    {"clock_after", first->after.rounds}});
    }
    report["cases"] = jc;
    report["ok"] = ok;
    if (!ok) report["error"] = "result check failed";
    emit();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    report["error"] = e.what();
    std::fprintf(stderr, "mpcache party %u: %s\n", o.id, e.what());
    emit();
    return 1;
  }
}

namespace {

// Tests (--stranger): what a stranger does to a listening party during
// set-up: one connection that sends 16 bytes of garbage and one that stays
// idle; both stay open until the job ends. Returns the sockets.
std::vector<int> play_stranger(std::uint16_t port, std::chrono::milliseconds within) {
  std::vector<int> fds;
  const auto limit = Clock::now() + within;
  while (fds.size() < 2) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      if (fds.empty()) {
        const std::string junk = "GET / HTTP/1.0\r\n\r\n";
        (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
      }
      fds.push_back(fd);
      continue;
    }
    ::close(fd);
    if (Clock::now() > limit) break;  // the party never listened: the job's own error says why
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fds;
}

// Each case across the parties (merge_party_costs): the slowest party's
// latency, the busiest party's bytes, rounds on the critical path.
json cases_across_parties(const json& parties, const Link& link) {
  json cases = json::array();
  const auto& first = parties[0]["cases"];
  for (std::size_t k = 0; k < first.size(); ++k) {
    std::vector<PartyCost> costs;
    for (const auto& r : parties) costs.push_back(party_cost_of_row(r["cases"][k]));
    const MergedCost m = merge_party_costs(costs);
    json c = {{"case", first[k]["case"]}, {"latency_s", m.latency_s}, {"bytes_max_party", m.bytes_max_party},
              {"bytes_total", m.bytes_total}, {"rounds", m.rounds}};
    if (link.name != "none") {
      // The formula next to the measurement; compute = the unemulated
      // run is not known here, so model_s counts link time only.
      c["model_link_s"] = link.seconds(static_cast<double>(m.rounds), static_cast<double>(m.bytes_max_party));
    }
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

LocalJobResult run_local_job(const LocalJob& o, const std::vector<std::string>& party_command) {
  // Everything is checked before a file is written or a process started.
  job_cases(o.job, o.network.link);
  o.network.check();
  if (party_command.empty()) throw Error(ErrorCode::invalid_argument, "run_local_job: no party command");
  const auto [fault_party, fault_kind] = parse_fault(o.fault, {"exit", "silent"});
  const LocalCluster cluster(o.network.insecure, o.timeout_ms);
  const std::string& dir = cluster.dir();
  const ClusterConfig config = read_cluster_config(cluster.config_path());
  std::vector<PartyProcess> processes;
  for (int i = 0; i < 3; ++i) {
    PartyJob party;
    party.config = dir + "/cluster.json";
    party.id = static_cast<unsigned>(i);
    party.network = o.network;
    party.job = o.job;
    party.repeat = o.repeat;
    party.threads = o.threads;
    party.report = dir + "/report-" + std::to_string(i) + ".json";
    if (i == fault_party) party.fault = fault_kind;
    PartyProcess p;
    p.args = party_command;
    const auto args = party_args(party);
    p.args.insert(p.args.end(), args.begin(), args.end());
    processes.push_back(std::move(p));
  }
  // Parties 0 and 1 listen; a stranger calls on each before its real peers.
  std::vector<int> stranger_fds;
  auto after_start = [&](std::size_t i) {
    if (!o.stranger || i >= 2) return;
    auto fds = play_stranger(config.parties[i].port, std::chrono::milliseconds(o.timeout_ms));
    stranger_fds.insert(stranger_fds.end(), fds.begin(), fds.end());
  };
  // Every party ends by itself within the deadlines; a last-resort limit
  // kills what is left (e.g. a --fault silent party).
  bool killed_late = false;
  LocalJobResult result;
  const auto exits = run_party_processes(processes, fault_party, 3 * o.timeout_ms + 300 * 1000, &killed_late,
                                         &result.stopped_by, /*grace_ms=*/2000, after_start);
  for (int fd : stranger_fds) ::close(fd);
  if (result.stopped_by != 0) return result;
  json summary = {{"job", o.job}, {"link", o.network.link}, {"link_emulated", o.network.link != "none"},
                  {"encrypted", !o.network.insecure}, {"parties", json::array()}};
  bool ok = !killed_late;
  for (int i = 0; i < 3; ++i) {
    json r;
    try {
      r = json::parse(read_text_file(dir + "/report-" + std::to_string(i) + ".json", "report"));
    } catch (const std::exception&) {
      r = {{"party", i}, {"ok", false}, {"error", "no report (the process died)"}};
    }
    r["exit_status"] = exits[i].status;
    ok = ok && exits[i].ok && r.value("ok", false);
    if (r.contains("transport")) summary["transport"] = r["transport"];
    summary["parties"].push_back(r);
  }
  summary["cases"] = ok ? cases_across_parties(summary["parties"], link_named(o.network.link)) : json::array();
  summary["ok"] = ok;
  result.report = std::move(summary);
  return result;
}

}  // namespace mpcache::jobs
