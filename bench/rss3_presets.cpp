// Presets `micro`, `ops` and `paper-table2`: the workloads of op_cases.cpp
// (mpcache-jobs) on rss3 or add2 (--protocol), either as three parties in
// this process (in-process transport, one thread, optionally over the
// emulated link) or, with --processes 3, as three processes over TCP
// (jobs::run_local_job starting the job runner mpcache-party, encrypted
// unless --insecure, over the emulated --link).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
import mpcache;
#include "bench_case.hpp"
#include "op_cases.hpp"
#include "party_job.hpp"
#include "three_party.hpp"

namespace mpcache::bench {
namespace {

// The in-process Section, seen through one party's CaseClock.
class SectionClock final : public jobs::CaseClock {
 public:
  SectionClock(Section& section, PartyId id) : section_(section), id_(id) {}
  Task<void> begin() override {
    section_.begin(id_);
    co_return;
  }
  void end() override { section_.end(id_); }

 private:
  Section& section_;
  PartyId id_;
};

// The preset's cases, or only the one --case names (an unknown name is refused with the list).
std::vector<jobs::OpCase> selected_cases(const std::string& preset, const Options& options) {
  auto cases = jobs::preset_cases(preset, planning_link(options.link));
  if (options.case_name.empty()) return cases;
  std::string names;
  for (auto& c : cases) {
    if (c.name == options.case_name) return {std::move(c)};
    names += (names.empty() ? "" : ", ") + c.name;
  }
  throw Error(ErrorCode::invalid_argument,
              "preset '" + preset + "' has no case '" + options.case_name + "' (" + names + ")");
}

std::vector<CaseResult> in_process(const std::string& preset, const Options& options) {
  std::vector<CaseResult> out;
  for (const jobs::OpCase& c : selected_cases(preset, options)) {
    CaseResult r = measure_case(c.name, c.elements, options,
                                [&]<class P>(P& p, PartyId id, Section& section) -> Task<void> {
                                  SectionClock clock(section, id);
                                  if (!co_await c.run(p, id, clock))
                                    throw Error(ErrorCode::protocol,
                                                c.name + ": the opened result is wrong");
                                });
    r.note = c.note;
    out.push_back(r);
  }
  return out;
}

// Three party processes on loopback (mpcache-party, started by
// run_local_job: the code and report of `mpcache local`); the report, or an
// Error with it if a party failed.
nlohmann::json local_job(const jobs::LocalJob& job) {
  const jobs::LocalJobResult result = jobs::run_local_job(job, {MPCACHE_PARTY_RUNNER});
  if (result.stopped_by != 0)
    throw Error(ErrorCode::cancelled, "three-process job '" + job.job + "': stopped by signal " +
                                          std::to_string(result.stopped_by) + " (passed on to the parties)");
  if (!result.report.value("ok", false))
    throw Error(ErrorCode::network, "three-process job '" + job.job + "' failed: " + result.report.dump());
  return result.report;
}

// Three processes: the merged report becomes one row per case. The model
// adds the same case's latency without emulation as compute.
std::vector<CaseResult> three_processes(const std::string& preset, const Options& options) {
  const auto cases = selected_cases(preset, options);  // for the notes, and --case's name
  jobs::LocalJob job;  // transport auto, deadline 10 s: as `mpcache local`'s defaults
  job.job = options.case_name.empty() ? preset : cases.front().name;
  job.repeat = options.repeat;
  job.network.insecure = options.insecure;
  job.network.spin_us = options.spin_us;
  const auto unemulated = local_job(job);
  const bool emulate = options.link.name != "none";
  job.network.link = options.link.name;
  const auto measured = emulate ? local_job(job) : unemulated;
  std::vector<CaseResult> out;
  for (std::size_t k = 0; k < measured["cases"].size(); ++k) {
    const auto& c = measured["cases"][k];
    CaseResult r;
    r.name = c["case"].get<std::string>();
    r.protocol = "rss3";
    r.transport = "3 processes, " + measured["transport"].get<std::string>();
    r.latency_s = c["latency_s"].get<double>();
    r.bytes_max_party = c["bytes_max_party"].get<std::uint64_t>();
    r.bytes_total = c["bytes_total"].get<std::uint64_t>();
    r.rounds = c["rounds"].get<std::uint64_t>();
    r.repeat = options.repeat;
    r.link_emulated = emulate;
    // The same formula as in-process rows, with the unemulated run as compute.
    CaseResult compute = r;
    compute.latency_s = unemulated["cases"][k]["latency_s"].get<double>();
    r.model_s = model_seconds(compute, options.link);
    for (const auto& n : cases)
      if (n.name == r.name) r.note = n.note;
    out.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<CaseResult> rss3_preset(const std::string& preset, const Options& options) {
  if (options.processes == 3 && options.protocol != "rss3")
    throw Error(ErrorCode::invalid_argument, "--processes 3 runs rss3 only; add2 runs in-process (--processes 1)");
  return options.processes == 3 ? three_processes(preset, options) : in_process(preset, options);
}

}  // namespace mpcache::bench
