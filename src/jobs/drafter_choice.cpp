// See drafter_choice.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <filesystem>
import mpcache;
#include "cluster_config.hpp"
#include "drafter_choice.hpp"

namespace mpcache::jobs {

namespace {
constexpr std::string_view ngram_prefix = "ngram:";
// Orders above 4 rarely continue byte text further and cost memory.
constexpr std::size_t ngram_order = 4;
}  // namespace

void check_drafter_name(const std::string& spec, bool client) {
  if (spec == "lookup") return;
  if (spec.starts_with(ngram_prefix)) {
    if (spec.size() == ngram_prefix.size())
      throw Error(ErrorCode::invalid_argument, "--draft ngram: needs a file of public text (ngram:FILE)");
    const std::string file = spec.substr(ngram_prefix.size());
    if (client && !std::filesystem::is_regular_file(file))
      throw Error(ErrorCode::invalid_argument, "--draft " + spec + ": no such file '" + file + "'");
    return;
  }
  if (spec.starts_with("model:"))
    throw Error(ErrorCode::invalid_argument,
                "--draft " + spec + ": a public draft model is not available yet; use lookup or ngram:FILE");
  throw Error(ErrorCode::invalid_argument, "unknown drafter '" + spec + "' (--draft): use lookup or ngram:FILE");
}

Drafter drafter_named(const std::string& spec,
                      const std::function<std::vector<std::uint32_t>(std::string_view)>& tokenize) {
  check_drafter_name(spec, /*client=*/true);
  if (spec == "lookup") return lookup_drafter();
  const std::string file = spec.substr(ngram_prefix.size());
  const std::string text = read_text_file(file, "the n-gram drafter's public text");
  return ngram_drafter(std::make_shared<const NgramModel>(tokenize(text), ngram_order));
}

}  // namespace mpcache::jobs
