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

// Every named policy: its name, its type for backend P, and the options
// its constructor takes after the budget (none: its defaults); the same
// options give its minimum_budget(). Adding a policy: its partition in this
// folder (exported by kv.cppm, imported above), then one line here.
#define MPCACHE_NAMED_POLICIES(X)                                   \
  X("mpcache", MpCache<P>, MpCacheOptions{})                        \
  X("mpcache-paper", MpCache<P>, MpCacheOptions::paper())           \
  X("mpcache-shared-step", MpCache<P>, MpCacheOptions::shared_step()) \
  X("mpcache-shared-layers", MpCache<P>, MpCacheOptions::shared_layers()) \
  X("full", FullCache<P>)                                           \
  X("streaming_llm", StreamingLlm<P>)                               \
  X("h2o", H2O<P>)                                                  \
  X("tova", Tova<P>)                                                \
  X("snapkv", SnapKv<P>)                                            \
  X("longcache", LongCache<P>)                                      \
  X("infllm", InfLlm<P>)                                            \
  X("quest", Quest<P>)                                              \
  X("arkvale", ArkVale<P>)                                          \
  X("arkvale-recall", ArkVale<P>, ArkValeOptions{.tier = PageTier::file})

export namespace mpcache::kv {

inline const std::vector<std::string>& policy_names() {
#define MPCACHE_POLICY_NAME(name, type, ...) name,
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

// The smallest budget the policy `name` takes (0: it ignores the budget).
// An unknown name is an error listing the known ones.
inline std::size_t minimum_budget(const std::string& name) {
  using P = Rss3;  // any backend: a minimum depends on the options only
#define MPCACHE_MINIMUM_OF_NAMED(policy_name, type, ...) \
  if (name == policy_name) return type::minimum_budget(__VA_ARGS__);
  MPCACHE_NAMED_POLICIES(MPCACHE_MINIMUM_OF_NAMED)
#undef MPCACHE_MINIMUM_OF_NAMED
  throw Error(ErrorCode::invalid_argument, "unknown policy '" + name + "' (" + policy_name_list() + ")");
}

// The budget a job uses when none is given: 48 tokens per KV head and step,
// or the policy's minimum where that is more (InfLLM's 51), so that every
// policy runs with the defaults.
inline constexpr std::size_t usual_budget = 48;
inline std::size_t default_budget(const std::string& name) { return std::max(usual_budget, minimum_budget(name)); }

// A policy by name with `budget` tokens per KV head per step (the full cache
// ignores it). An unknown name, or a budget below the policy's minimum, is
// an error saying so (and naming the minimum).
template <Protocol P>
AnyPolicy<P> make_policy(const std::string& name, std::size_t budget) {
#define MPCACHE_MAKE_NAMED(policy_name, type, ...) \
  if (name == policy_name) return AnyPolicy<P>(type(budget __VA_OPT__(, ) __VA_ARGS__));
  MPCACHE_NAMED_POLICIES(MPCACHE_MAKE_NAMED)
#undef MPCACHE_MAKE_NAMED
  throw Error(ErrorCode::invalid_argument, "unknown policy '" + name + "' (" + policy_name_list() + ")");
}

}  // namespace mpcache::kv

// Compiled once, in src/kv/make_policy.cpp.in, for the four backends: every
// program that names a policy would otherwise compile all of them for each.
namespace mpcache::kv {
#define MPCACHE_EXTERN_MAKE_POLICY(B) extern template AnyPolicy<B> make_policy<B>(const std::string&, std::size_t);
MPCACHE_FOR_EACH_BACKEND(MPCACHE_EXTERN_MAKE_POLICY)
#undef MPCACHE_EXTERN_MAKE_POLICY
}  // namespace mpcache::kv
