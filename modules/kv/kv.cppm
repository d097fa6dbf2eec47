// mpcache.kv: KV-cache policies behind one Policy concept (MPCache and the
// baselines it is measured against), generic over the Protocol.
module;
#include "prelude.hpp"
export module mpcache.kv;
export import :policy;
export import :baselines;
export import :clusters;
export import :mpcache;
export import :any_policy;
export import :infllm;
