// Policies by name, for the CLI, the benches and a job header: every policy
// of mpcache.kv at a public budget of tokens per KV head per step, with its
// default options ("mpcache" our defaults, "mpcache-paper" the paper's).
module;
#include "backends.hpp"
export module mpcache.kv:named;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :policy;
import :full_cache;
import :streaming_llm;
import :h2o;
import :tova;
import :snapkv;
import :longcache;
import :infllm;
import :quest;
import :page_store;
import :arkvale;
import :mpcache;
import :any_policy;

// Every named policy: its name, then the expression that makes it for
// backend P at `budget` tokens. Adding a policy: its partition in this
// folder (exported by kv.cppm, imported above), then one line here.
#define MPCACHE_NAMED_POLICIES(X)                                 \
  X("mpcache", MpCache<P>(budget, MpCacheOptions{}))              \
  X("mpcache-paper", MpCache<P>(budget, MpCacheOptions::paper())) \
  X("full", FullCache<P>{})                                       \
  X("streaming_llm", StreamingLlm<P>(budget))                     \
  X("h2o", H2O<P>(budget))                                        \
  X("tova", Tova<P>(budget))                                      \
  X("snapkv", SnapKv<P>(budget))                                  \
  X("longcache", LongCache<P>(budget))                            \
  X("infllm", InfLlm<P>(budget))                                  \
  X("quest", Quest<P>(budget))                                    \
  X("arkvale", ArkVale<P>(budget))                                \
  X("arkvale-recall", ArkVale<P>(budget, ArkValeOptions{.tier = PageTier::file}))

export namespace mpcache::kv {

inline const std::vector<std::string>& policy_names() {
#define MPCACHE_POLICY_NAME(name, make) name,
  static const std::vector<std::string> names = {MPCACHE_NAMED_POLICIES(MPCACHE_POLICY_NAME)};
#undef MPCACHE_POLICY_NAME
  return names;
}

// "a, b or c"
inline std::string policy_name_list() {
  const auto& names = policy_names();
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

// A policy by name with `budget` tokens per KV head per step (the full cache
// ignores it). An unknown name, or a budget the policy cannot work with, is
// an error saying so.
template <Protocol P>
AnyPolicy<P> make_policy(const std::string& name, std::size_t budget) {
  if (name == "full") return AnyPolicy<P>(FullCache<P>{});
  const auto& names = policy_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw Error(ErrorCode::invalid_argument, "unknown policy '" + name + "' (" + policy_name_list() + ")");
  if (budget == 0) throw Error(ErrorCode::invalid_argument, "policy " + name + ": budget must be at least 1 token");
#define MPCACHE_MAKE_NAMED(policy_name, make) \
  if (name == policy_name) return AnyPolicy<P>(make);
  MPCACHE_NAMED_POLICIES(MPCACHE_MAKE_NAMED)
#undef MPCACHE_MAKE_NAMED
  throw Error(ErrorCode::invalid_argument, "policy " + name + " is named but has no maker");
}

}  // namespace mpcache::kv

// Compiled once, in src/kv/make_policy.cpp.in, for the four backends: every
// program that names a policy would otherwise compile all of them for each.
namespace mpcache::kv {
#define MPCACHE_EXTERN_MAKE_POLICY(B) extern template AnyPolicy<B> make_policy<B>(const std::string&, std::size_t);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_EXTERN_MAKE_POLICY)
#undef MPCACHE_EXTERN_MAKE_POLICY
}  // namespace mpcache::kv
