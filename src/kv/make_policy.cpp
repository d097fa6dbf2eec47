// make_policy for each backend, compiled here once (kv:named declares them
// extern): a program that names a policy links these instead of compiling
// all ten policies for its backend.
module;
#include "prelude.hpp"
module mpcache.kv;
import mpcache.proto;

namespace mpcache::kv {
template AnyPolicy<Rss3> make_policy<Rss3>(const std::string&, std::size_t);
template AnyPolicy<Add2> make_policy<Add2>(const std::string&, std::size_t);
template AnyPolicy<Ref> make_policy<Ref>(const std::string&, std::size_t);
template AnyPolicy<Plain> make_policy<Plain>(const std::string&, std::size_t);
}  // namespace mpcache::kv
