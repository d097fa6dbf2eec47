// Runs a 3-party case (rss3, or add2 with party 2 the dealer) in this
// process and measures one marked section per party: wall time from the
// first online party entering it to the last leaving, payload bytes per
// party, rounds on the critical path. Include after imports.
#pragma once

namespace mpcache::bench {

struct Section {
  std::array<jobs::SectionMark, 3> marks;  // per party
  InProcessNetwork* network = nullptr;

  void begin(PartyId id) { marks[id].begin(network->endpoint(id)); }
  void end(PartyId id) { marks[id].end(network->endpoint(id)); }
};

struct Sample {
  double seconds = 0;
  std::array<CostCounters, 3> costs;
  std::uint64_t rounds = 0;
};

// body(P&, PartyId, Section&) -> Task<void> (generic over the backend);
// calls section.begin/end once. With `emulate`, every batch crosses an
// emulated link (LinkEmulator, timers on this loop): one-way delay RTT/2
// after serialization at the bandwidth. Under add2 the dealer (party 2) runs
// ahead: its section counts for bytes (offline) but not for time or rounds.
// `threads` > 1: the parties share one ComputePool of that many threads
// (they run one after another on this thread).
template <class Body>
Sample run_three_parties(Body body, const std::string& protocol, const Link* emulate = nullptr,
                         std::size_t threads = 1) {
  std::optional<ComputePool> pool;
  if (threads > 1) pool.emplace(threads);
  ComputePool* const pool_ptr = pool ? &*pool : nullptr;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::optional<TimerLoop> timers;
  std::optional<LinkEmulator> emulator;
  if (emulate) {
    timers.emplace(scheduler);
    emulator.emplace(network, timers->timers(), *emulate);
    for (PartyId id = 0; id < 3; ++id) network.endpoint(id).attach(&*emulator);
  }
  Section section;
  section.network = &network;
  const bool dealt = protocol == "add2";
  // The op cases truncate probabilistically, as the papers they compare with
  // (their exact costs are pinned by tests and in docs/protocols.md).
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    if (dealt) {
      auto state = co_await Add2Party::setup(network.endpoint(id), {.exact_truncation = false, .pool = pool_ptr});
      Add2 p = state->session();
      co_await body(p, id, section);
    } else {
      auto state = co_await Rss3Party::setup(network.endpoint(id), {.exact_truncation = false, .pool = pool_ptr});
      Rss3 p = state->session();
      co_await body(p, id, section);
    }
  });
  const std::size_t online = dealt ? 2 : 3;
  Sample s;
  // First online party in to last one out.
  auto first_in = section.marks[0].start, last_out = section.marks[0].stop;
  CriticalPath path;
  for (std::size_t i = 0; i < 3; ++i) {
    const jobs::SectionMark& m = section.marks[i];
    s.costs[i] = m.costs();
    if (i >= online) continue;
    path.add(m.before.rounds, m.after.rounds);
    first_in = std::min(first_in, m.start);
    last_out = std::max(last_out, m.stop);
  }
  s.seconds = std::chrono::duration<double>(last_out - first_in).count();
  s.rounds = path.rounds();
  return s;
}

// Repeats, reports the median latency and the (identical) costs.
template <class Body>
CaseResult measure_case(const std::string& name, std::uint64_t elements, const Options& options,
                        Body body) {
  std::vector<Sample> samples;
  for (int r = 0; r < options.repeat; ++r)
    samples.push_back(run_three_parties(body, options.protocol, nullptr, options.threads));
  std::vector<double> times;
  for (const auto& s : samples) times.push_back(s.seconds);
  std::sort(times.begin(), times.end());
  // --emulate: the headline is measured over the emulated link; the model
  // keeps the unemulated time as its compute term.
  std::vector<double> emulated;
  const bool emulate = options.emulate && options.link.name != "none";
  if (emulate) {
    for (int r = 0; r < options.repeat; ++r)
      emulated.push_back(run_three_parties(body, options.protocol, &options.link, options.threads).seconds);
    std::sort(emulated.begin(), emulated.end());
  }
  const Sample& s = samples.front();
  CaseResult c;
  c.name = name;
  c.protocol = options.protocol;
  c.transport = "in-process";
  c.elements = elements;
  c.latency_s = times[times.size() / 2];
  c.threads = options.threads;
  for (std::size_t i = 0; i < 3; ++i) {
    const CostCounters& k = s.costs[i];
    if (options.protocol == "add2" && i == add2_dealer) {
      c.offline_bytes = k.payload_bytes_sent();
      continue;
    }
    c.bytes_max_party = std::max(c.bytes_max_party, k.payload_bytes_sent());
    c.messages_max_party = std::max(c.messages_max_party, k.messages_sent());
    c.bytes_total += k.payload_bytes_sent();
    c.frame_bytes_total += k.frame_bytes_sent();
  }
  c.rounds = s.rounds;
  c.repeat = options.repeat;
  if (emulate) {
    c.model_s = model_seconds(c, options.link);
    c.latency_s = emulated[emulated.size() / 2];
    c.link_emulated = true;
    c.transport = "in-process+emulated-" + options.link.name;
  }
  return c;
}

}  // namespace mpcache::bench
