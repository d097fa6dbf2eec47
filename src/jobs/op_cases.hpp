// The workloads of presets `micro`, `ops` and `paper-table2`, defined once
// for every backend (rss3, add2) and run both by mpcache-bench (three parties
// in one process) and by the party jobs of party_job.hpp (three processes
// over TCP: `mpcache local`, mpcache-bench --processes 3). Include after
// `import mpcache;`.
#pragma once

namespace mpcache::jobs {

// One party's timed section as it saw it: its counters and the time on
// entering and leaving. The one record of a timed section, in one process
// (bench's Section, a mark per party) and across processes (the Recorder of
// run_party, party_job.cpp, a mark per case); rounds across parties come from the
// marks' clocks through CriticalPath.
struct SectionMark {
  CostCounters before, after;
  std::chrono::steady_clock::time_point start, stop;

  void begin(const Endpoint& endpoint) {
    before = endpoint.costs();
    start = std::chrono::steady_clock::now();
  }
  void end(const Endpoint& endpoint) {
    stop = std::chrono::steady_clock::now();
    after = endpoint.costs();
  }
  double seconds() const { return std::chrono::duration<double>(stop - start).count(); }
  CostCounters costs() const { return after - before; }
};

// Marks one party's timed section. In one process the parties' sections are
// compared on one clock; across processes `begin` first meets the peers
// (a barrier, not counted) so a party does not time its wait for the others.
class CaseClock {
 public:
  virtual ~CaseClock() = default;
  virtual Task<void> begin() = 0;
  virtual void end() = 0;
};

// Shares the inputs (untimed), runs the timed section between clock.begin()
// and clock.end(), then checks a few outputs against clear text (untimed;
// party 0 learns them). Returns whether the check passed. One body per
// backend, made from one generic lambda (case_body).
template <class P>
using CaseFn = std::function<Task<bool>(P&, PartyId, CaseClock&)>;
struct CaseBody {
  CaseFn<Rss3> rss3;
  CaseFn<Add2> add2;
  Task<bool> operator()(Rss3& p, PartyId id, CaseClock& clock) const { return rss3(p, id, clock); }
  Task<bool> operator()(Add2& p, PartyId id, CaseClock& clock) const { return add2(p, id, clock); }
  explicit operator bool() const { return bool(rss3); }
};
template <class F>
CaseBody case_body(F f) {
  return {CaseFn<Rss3>(f), CaseFn<Add2>(f)};
}

struct OpCase {
  std::string name;
  std::uint64_t elements = 0;  // outputs per run
  std::string note;
  CaseBody run;
};

// micro: mul-1M, fixed-mul-1M, matvec-1x1024x1024.
std::vector<OpCase> micro_cases();
// ops: micro plus comparisons, softmax, sort, top-k, one-hot, attention step.
// paper-table2: token- vs cluster-wise top 25% with gathers.
// `link` picks the top-k method (rank-based or network) by the cost model.
std::vector<OpCase> preset_cases(const std::string& preset, const Link& link);
// Names of a preset's cases, or of the one case called `name`; throws an
// Error naming the valid choices otherwise.
std::vector<OpCase> cases_named(const std::string& name, const Link& link);

}  // namespace mpcache::jobs
