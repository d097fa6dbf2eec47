// Communication cost counters, per party. Payload bytes are what protocols
// send; frame bytes are the per-message headers, counted separately so that
// payload figures match the textbook cost of each protocol exactly.
module;
#include "prelude.hpp"
export module mpcache.core:cost;

export namespace mpcache {

struct PeerTraffic {
  std::uint64_t payload_bytes_sent = 0;
  std::uint64_t frame_bytes_sent = 0;   // headers only
  std::uint64_t messages_sent = 0;      // logical messages (frames)
  std::uint64_t writes = 0;             // coalesced batches handed to the transport
  std::uint64_t payload_bytes_received = 0;
  std::uint64_t messages_received = 0;

  PeerTraffic& operator-=(const PeerTraffic& o);
};

struct CostCounters {
  std::vector<PeerTraffic> per_peer;  // indexed by party id; own entry stays zero
  std::uint64_t rounds = 0;           // depth of the longest chain of dependent messages

  std::uint64_t payload_bytes_sent() const;
  std::uint64_t frame_bytes_sent() const;
  std::uint64_t messages_sent() const;
  std::uint64_t writes() const;
  // Difference of two snapshots of the same party (later - earlier).
  friend CostCounters operator-(CostCounters later, const CostCounters& earlier);
};

}  // namespace mpcache
