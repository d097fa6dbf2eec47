// mpcache.net: frames, endpoints with per-tick coalescing, transports, one
// partition per job: timers, records and their reader, party keys, connection
// set-up, the TCP transport, link emulation, the loop's inbox for other
// threads, a service's door for clients.
export module mpcache.net;
import mpcache.std;
export import :frame;
export import :endpoint;
export import :in_process;
export import :timers;
export import :records;
export import :record_reader;
export import :keys;
export import :connect;
export import :tcp;
export import :link_emulation;
export import :loop_inbox;
export import :client_gate;
