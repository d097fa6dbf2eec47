// A network link between every pair of parties, and the one cost formula
// built on it: rounds x RTT + bytes / bandwidth. Cost models pick algorithms
// with it (ops), the bench reports model times with it, and net emulates it.
module;
#include "prelude.hpp"
export module mpcache.core:link;

export namespace mpcache {

struct Link {
  std::string name = "none";
  double rtt_s = 0;
  double bytes_per_s = 0;  // per direction; 0: unlimited

  // The time `rounds` dependent round trips and `bytes` sent one way take.
  double seconds(double rounds, double bytes) const noexcept {
    return rounds * rtt_s + (bytes_per_s > 0 ? bytes / bytes_per_s : 0);
  }
};

// The paper's LAN: 0.3 ms RTT, 377 MB/s.
Link lan_link();
// The paper's WAN: 40 ms RTT, 300 Mbit/s.
Link wan_link();

// "lan", "wan", "none" (or ""), or a custom "RTT_MS:MBYTES_PER_S" such as
// "10:100". Anything else throws Error(invalid_argument) naming the value.
Link link_named(const std::string& name);

// The link to plan for: `link`, or the LAN when there is none (on a free
// link every method costs nothing and the choice would be arbitrary).
Link planning_link(const Link& link);

}  // namespace mpcache
