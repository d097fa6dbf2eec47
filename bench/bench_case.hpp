// One row of benchmark output, shared by every preset.
#pragma once

namespace mpcache::bench {

struct CaseResult {
  std::string name;
  std::string protocol;
  std::string transport;
  std::uint64_t elements = 0;       // outputs per run
  double latency_s = 0;             // median wall time over repeats
  std::uint64_t bytes_max_party = 0;   // payload bytes sent by the busiest party
  std::uint64_t bytes_total = 0;       // payload bytes sent by all parties
  std::uint64_t frame_bytes_total = 0; // message headers, all parties
  std::uint64_t messages_max_party = 0;
  std::uint64_t rounds = 0;            // critical path
  std::uint64_t offline_bytes = 0;     // add2: what the dealer sent (the others' bytes are online)
  int repeat = 0;
  std::size_t threads = 1;  // the compute pool's (1: no pool)
  std::string note;
  std::string link;               // "" = the --link option
  bool link_emulated = false;     // latency measured over an emulated link
  std::optional<double> model_s;  // set by presets that measure compute apart
};

// The model time on a link: the link's time for the case's rounds and the
// busiest party's bytes, plus the measured compute. With --emulate the
// in-process presets also run over the emulated link (LinkEmulator) and
// report that measurement as latency_s.
inline double model_seconds(const CaseResult& c, const Link& link) {
  if (c.model_s) return *c.model_s;
  return link.seconds(static_cast<double>(c.rounds), static_cast<double>(c.bytes_max_party)) + c.latency_s;
}

struct Options {
  int repeat = 3;
  Link link;
  bool emulate = false;  // measure over the emulated link (in-process presets)
  int processes = 1;      // 3: micro/ops/paper-table2 as three processes over TCP
  bool insecure = false;  // with processes = 3: plain TCP instead of AES-GCM channels
  int spin_us = static_cast<int>(default_spin.count());  // with processes = 3: TcpOptions::spin (more: low-latency mode)
  int load = 0;           // threads kept busy while the benchmark runs (--load)
  std::string protocol = "rss3";  // micro, ops, paper-table2: rss3 | add2 (in-process)
  std::string case_name;          // micro, ops, paper-table2: run only this case of the preset (--case)
  std::size_t threads = 1;        // kernels, in-process micro/ops/paper-table2: ComputePool threads (1: no pool)
};

}  // namespace mpcache::bench
