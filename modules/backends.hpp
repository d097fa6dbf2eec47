// The backends compiled once each: decoder, weight loading, generation and
// the named policies are explicitly instantiated for each
// (src/model/instantiate.cpp.in, src/kv/make_policy.cpp.in) and declared
// extern for everyone else. CMake reads these lists too.
//
//   * MPC backends: instantiated in the library mpcache.
//   * Reference backends (float64 clear text: tests, the CLI's --check, the
//     fidelity benches): instantiated in the static library
//     mpcache-reference, which a program that runs them links. The library
//     and its installed package do not carry them; a program that does not
//     use them links without them (the declarations are only extern).
//
// Adding a backend: its partition and implementation under modules/proto
// and src/proto (CMake globs both; proto.cppm exports the partition), then
// one X(...) in the list it belongs to.
#pragma once

#define MPCACHE_FOR_EACH_MPC_BACKEND(X) X(Rss3) X(Add2)
#define MPCACHE_FOR_EACH_REFERENCE_BACKEND(X) X(Ref) X(Plain)
#define MPCACHE_FOR_EACH_BACKEND(X) MPCACHE_FOR_EACH_MPC_BACKEND(X) MPCACHE_FOR_EACH_REFERENCE_BACKEND(X)
