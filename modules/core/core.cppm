// mpcache.core: party and stream ids, the ring Z_2^64, fixed-point encoding,
// errors, cost counters, the link model, the caller's compute pool.
export module mpcache.core;
import mpcache.std;
export import :ids;
export import :error;
export import :compute_pool;
export import :tensor;
export import :ring;
export import :fixed_point;
export import :cost;
export import :link;
export import :wire;
