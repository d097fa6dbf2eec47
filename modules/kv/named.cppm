// Policies by name, for the CLI, the benches and a job header: every policy
// of mpcache.kv at a public budget of tokens per KV head per step, with its
// default options ("mpcache" our defaults, "mpcache-paper" the paper's).
module;
#include "prelude.hpp"
export module mpcache.kv:named;
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

export namespace mpcache::kv {

inline const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"mpcache", "mpcache-paper", "full",   "streaming_llm", "h2o",    "tova",
                                                 "snapkv",  "longcache",     "infllm", "quest",         "arkvale", "arkvale-recall"};
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
  if (name == "mpcache") return AnyPolicy<P>(MpCache<P>(budget, MpCacheOptions{}));
  if (name == "mpcache-paper") return AnyPolicy<P>(MpCache<P>(budget, MpCacheOptions::paper()));
  if (name == "streaming_llm") return AnyPolicy<P>(StreamingLlm<P>(budget));
  if (name == "h2o") return AnyPolicy<P>(H2O<P>(budget));
  if (name == "tova") return AnyPolicy<P>(Tova<P>(budget));
  if (name == "snapkv") return AnyPolicy<P>(SnapKv<P>(budget));
  if (name == "longcache") return AnyPolicy<P>(LongCache<P>(budget));
  if (name == "infllm") return AnyPolicy<P>(InfLlm<P>(budget));
  if (name == "quest") return AnyPolicy<P>(Quest<P>(budget));
  if (name == "arkvale") return AnyPolicy<P>(ArkVale<P>(budget));
  ArkValeOptions recall;  // "arkvale-recall": pages in each party's backing file
  recall.tier = PageTier::file;
  return AnyPolicy<P>(ArkVale<P>(budget, recall));
}

}  // namespace mpcache::kv

// Compiled once, in src/kv/make_policy.cpp, for the four backends: every
// program that names a policy would otherwise compile all of them for each.
namespace mpcache::kv {
extern template AnyPolicy<Rss3> make_policy<Rss3>(const std::string&, std::size_t);
extern template AnyPolicy<Add2> make_policy<Add2>(const std::string&, std::size_t);
extern template AnyPolicy<Ref> make_policy<Ref>(const std::string&, std::size_t);
extern template AnyPolicy<Plain> make_policy<Plain>(const std::string&, std::size_t);
}  // namespace mpcache::kv
