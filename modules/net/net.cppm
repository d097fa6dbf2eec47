// mpcache.net: frames, endpoints with per-tick coalescing, transports, one
// partition per job: timers, records, party keys, connection set-up, the TCP
// transport, link emulation.
module;
#include "prelude.hpp"
export module mpcache.net;
export import :frame;
export import :endpoint;
export import :in_process;
export import :timers;
export import :records;
export import :keys;
export import :connect;
export import :tcp;
export import :link_emulation;
