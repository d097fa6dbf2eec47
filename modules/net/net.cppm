// mpcache.net: frames, endpoints with per-tick coalescing, transports.
module;
#include "prelude.hpp"
export module mpcache.net;
export import :frame;
export import :endpoint;
export import :in_process;
export import :tcp;
