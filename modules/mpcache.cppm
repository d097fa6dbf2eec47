// The whole public API in one import.
export module mpcache;
import mpcache.std;
export import mpcache.core;
export import mpcache.text;
export import mpcache.async;
export import mpcache.net;
export import mpcache.proto;
export import mpcache.ops;
export import mpcache.kv;
export import mpcache.model;
export import mpcache.serve;
