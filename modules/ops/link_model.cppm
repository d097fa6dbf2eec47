// The link that cost models choose algorithms for (tournament arity, top-k
// method): round trip time and bandwidth, by default the paper's LAN.
module;
#include "prelude.hpp"
export module mpcache.ops:link_model;

export namespace mpcache::ops {

struct LinkModel {
  double rtt_s = 0.3e-3;       // the paper's LAN
  double bytes_per_s = 377e6;

  // rounds x RTT + bytes / bandwidth.
  double seconds(double rounds, double bytes) const noexcept { return rounds * rtt_s + bytes / bytes_per_s; }
};

}  // namespace mpcache::ops
