// The client's side of text: its tokenizer, the prompt's ids, and generated
// ids back to text as they arrive. Shared by `mpcache generate` (whose party
// 0 is the client), `mpcache client` (a service's client) and the Python
// package (src/python). Only the client reads tokenizer files. Include after `import mpcache;`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
import mpcache.text;

namespace mpcache::jobs {

// `spec`: auto (the model folder's tokenizer, or its mpcache.json's
// "tokenizer": "none"), none (token id = byte value), or a folder holding
// one. Refuses a tokenizer with more tokens than the model's `vocab`.
std::unique_ptr<text::Tokenizer> client_tokenizer(const std::string& spec, const std::string& model_dir,
                                                  std::size_t vocab);

std::vector<std::uint32_t> encode_prompt(const text::Tokenizer& tok, const std::string& prompt);

// Generated ids to text as they arrive (never half a UTF-8 character); an id
// the tokenizer does not know (a model's padding rows) shows as U+FFFD.
class TextStream {
 public:
  explicit TextStream(const text::Tokenizer& tok) : tok_(&tok), decoder_(tok, {}, /*at_text_start=*/false) {}
  std::string push(std::uint32_t id);
  // Bytes held back for a character that never completed (as U+FFFD).
  std::string finish();
  const std::string& text() const { return text_; }

 private:
  const text::Tokenizer* tok_;
  text::StreamingDecoder decoder_;
  std::string text_;
};

}  // namespace mpcache::jobs
