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
  int repeat = 0;
  std::string note;
};

struct Options {
  int repeat = 3;
};

}  // namespace mpcache::bench
