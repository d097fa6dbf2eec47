// --draft: the client's drafter for speculative decoding, by name.
//   lookup      continue an n-gram of the prompt or the output
//   ngram:FILE  an n-gram model of the public text FILE, tokenized by the
//               client's tokenizer
//   model:DIR   a public draft model: not available yet (refused by name)
// Include after `import mpcache;`.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mpcache::jobs {

// The drafter `spec` names; `tokenize` is the client's. A bad name, or a
// FILE that cannot be read, is an Error naming it.
Drafter drafter_named(const std::string& spec,
                      const std::function<std::vector<std::uint32_t>(std::string_view)>& tokenize);

// Checks `spec` before any work; `client`: also that its file is there
// (only the client reads it).
void check_drafter_name(const std::string& spec, bool client = false);

}  // namespace mpcache::jobs
