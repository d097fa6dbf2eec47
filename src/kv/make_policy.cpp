// make_policy for each backend, compiled here once (kv:named declares them
// extern): a program that names a policy links these instead of compiling
// all ten policies for its backend.
module;
#include "prelude.hpp"
#include "backends.hpp"
module mpcache.kv;
import mpcache.proto;

namespace mpcache::kv {
#define MPCACHE_MAKE_POLICY(B) template AnyPolicy<B> make_policy<B>(const std::string&, std::size_t);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_MAKE_POLICY)
#undef MPCACHE_MAKE_POLICY
}  // namespace mpcache::kv
