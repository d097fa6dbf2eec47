// The pre-tokenizer regexes of byte-level BPE tokenizers (internal), matched
// by hand because std::regex has no \p{L} / \p{N}.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace mpcache::text::detail {

enum class SplitPattern {
  gpt2,    // GPT-2, SmolLM, RoBERTa... (the ByteLevel pre-tokenizer's own regex)
  llama3,  // LLaMA-3 (tiktoken cl100k style: \p{N}{1,3})
  qwen2,   // Qwen2 (as llama3 with single digits: \p{N})
};

// The regex as written in tokenizer.json.
std::string_view pattern_text(SplitPattern pattern);
// Which of the above `regex` is (exact text), if any.
std::optional<SplitPattern> recognize_split_pattern(std::string_view regex);

// Splits valid UTF-8 `text` into the consecutive matches of `pattern`
// (every character belongs to some match, so the pieces cover `text`).
void split_by_pattern(SplitPattern pattern, std::string_view text, std::vector<std::string_view>& out);

}  // namespace mpcache::text::detail
