// mpcache.proto: the Protocol concept, the base of the backends' local operations, the PRG, distributed comparison functions, and the rss3, add2, plain and ref backends.
export module mpcache.proto;
import mpcache.std;
export import :protocol;
export import :linear_base;
export import :prg;
export import :dcf;
export import :rss3;
export import :add2;
export import :mode;
export import :plain;
export import :ref;
export import :client_shares;
