// See client_text.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "client_text.hpp"

namespace mpcache::jobs {

std::unique_ptr<text::Tokenizer> client_tokenizer(const std::string& spec, const std::string& model_dir,
                                                  std::size_t vocab) {
  std::unique_ptr<text::Tokenizer> tok;
  try {
    if (spec == "none") tok = text::make_byte_tokenizer();
    else tok = text::load_tokenizer(spec == "auto" ? model_dir : spec);
  } catch (const text::TokenizerError& e) {
    if (spec == "auto")
      throw Error(ErrorCode::invalid_argument,
                  std::string("the model's tokenizer: ") + e.what() +
                      ". Give --tokenizer DIR (a folder with the model's tokenizer), or --tokenizer none if the "
                      "model's tokens are bytes");
    throw Error(ErrorCode::invalid_argument, std::string("--tokenizer ") + spec + ": " + e.what());
  }
  if (tok->vocab_size() > vocab)
    throw Error(ErrorCode::invalid_argument,
                "the tokenizer (" + tok->name() + ") has " + std::to_string(tok->vocab_size()) +
                    " tokens, more than the model's vocabulary of " + std::to_string(vocab) +
                    ": they do not belong together");
  return tok;
}

std::vector<std::uint32_t> encode_prompt(const text::Tokenizer& tok, const std::string& prompt) {
  try {
    return tok.encode(prompt);
  } catch (const text::TokenizerError& e) {
    throw Error(ErrorCode::invalid_argument, std::string("the prompt: ") + e.what());
  }
}

std::string TextStream::push(std::uint32_t id) {
  std::string piece = id < tok_->vocab_size() ? decoder_.push(id) : decoder_.finish() + "\xEF\xBF\xBD";
  text_ += piece;
  return piece;
}

std::string TextStream::finish() {
  std::string rest = decoder_.finish();
  text_ += rest;
  return rest;
}

}  // namespace mpcache::jobs
