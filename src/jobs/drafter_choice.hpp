// --draft: the client's drafter for speculative decoding, by name.
//   lookup      continue an n-gram of the prompt or the output
//   ngram:FILE  an n-gram model of the public text FILE, tokenized by the
//               client's tokenizer
//   model:DIR   a public model folder the client runs in the clear (float64),
//               drafting its greedy tokens
// Include after `import mpcache;`.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mpcache::jobs {

// The drafter `spec` names; `target_vocab` is the private model's (its
// drafts are token ids of it); `tokenize` is the client's. A bad name, or a
// FILE or DIR that cannot be read, is an Error naming it.
Drafter drafter_named(const std::string& spec, std::size_t target_vocab,
                      const std::function<std::vector<std::uint32_t>(std::string_view)>& tokenize);

// Checks `spec` before any work; `client`: also that its file is there
// (only the client reads it).
void check_drafter_name(const std::string& spec, bool client = false);

}  // namespace mpcache::jobs
