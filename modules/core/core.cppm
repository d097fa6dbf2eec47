// mpcache.core: party and stream ids, the ring Z_2^64, fixed-point encoding,
// errors, cost counters, the link model.
module;
#include "prelude.hpp"
export module mpcache.core;
export import :ids;
export import :error;
export import :ring;
export import :fixed_point;
export import :cost;
export import :link;
