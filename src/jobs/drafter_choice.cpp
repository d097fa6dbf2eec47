// See drafter_choice.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <filesystem>
import mpcache;
#include "cluster_config.hpp"
#include "drafter_choice.hpp"

namespace mpcache::jobs {

namespace {
constexpr std::string_view ngram_prefix = "ngram:";
constexpr std::string_view model_prefix = "model:";
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
  if (spec.starts_with(model_prefix)) {
    if (spec.size() == model_prefix.size())
      throw Error(ErrorCode::invalid_argument, "--draft model: needs a public model folder (model:DIR)");
    const std::filesystem::path dir = spec.substr(model_prefix.size());
    if (client)
      for (const char* file : {"config.json", "model.safetensors"})
        if (!std::filesystem::is_regular_file(dir / file))
          throw Error(ErrorCode::invalid_argument,
                      "--draft " + spec + ": no " + file + " in '" + dir.string() + "' (a draft model folder)");
    return;
  }
  throw Error(ErrorCode::invalid_argument,
              "unknown drafter '" + spec + "' (--draft): use lookup, ngram:FILE or model:DIR");
}

Drafter drafter_named(const std::string& spec, std::size_t target_vocab,
                      const std::function<std::vector<std::uint32_t>(std::string_view)>& tokenize) {
  check_drafter_name(spec, /*client=*/true);
  if (spec == "lookup") return lookup_drafter();
  if (spec.starts_with(model_prefix)) return model_drafter(spec.substr(model_prefix.size()), target_vocab);
  const std::string file = spec.substr(ngram_prefix.size());
  const std::string text = read_text_file(file, "the n-gram drafter's public text");
  return ngram_drafter(std::make_shared<const NgramModel>(tokenize(text), ngram_order));
}

}  // namespace mpcache::jobs
