// The backends the library compiles once for: decoder, weight loading,
// generation and the named policies are explicitly instantiated for each
// (src/model/instantiate.cpp.in, src/kv/make_policy.cpp.in) and declared
// extern for everyone else. CMake reads this list too.
//
// Adding a backend: its partition and implementation under modules/proto
// and src/proto (CMake globs both; proto.cppm exports the partition), then
// one X(...) here.
#pragma once

#define MPCACHE_FOR_EACH_BACKEND(X) X(Rss3) X(Add2) X(Ref) X(Plain)
