// mpcache.kv: KV-cache policies behind one Policy concept (MPCache and the
// baselines it is measured against), generic over the Protocol; one policy
// per partition, and make_policy() to pick one by name.
export module mpcache.kv;
import mpcache.std;
export import :policy;
export import :selection;
export import :clusters;
export import :page_store;
export import :full_cache;
export import :streaming_llm;
export import :h2o;
export import :tova;
export import :snapkv;
export import :longcache;
export import :infllm;
export import :quest;
export import :arkvale;
export import :mpcache;
export import :mpcache_eviction;
export import :mpcache_selection;
export import :mpcache_scoring;
export import :any_policy;
export import :named;
