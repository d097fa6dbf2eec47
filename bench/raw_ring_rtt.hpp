// The floor under the transport's round trip: the same 8-byte ping-pong on
// two connected sockets with a bare io_uring per side (no scheduler,
// endpoint, records or AEAD), so `net` can split a round trip into the ring's
// cost and ours. Plain C++: liburing stays out of module units.
#pragma once

namespace mpcache::bench {

// How a side waits for its receive to complete.
enum class RingWait {
  ring,    // in io_uring_enter (GETEVENTS, min_complete 1)
  poll,    // reap completions without sleeping, yielding between polls
  socket,  // poll(2) on the socket until it is readable, then run the
           // ring's deferred work (GETEVENTS without waiting)
};

// Seconds per round trip over `round_trips` ping-pongs between fd_a (which
// sends first) and fd_b, one thread each. The rings are set up as the
// transport's (single issuer, deferred task work).
double raw_ring_rtt(int fd_a, int fd_b, int round_trips, RingWait wait);

}  // namespace mpcache::bench
