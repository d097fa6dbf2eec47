// Incremental detokenization that never splits a UTF-8 character.
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include "utf8.hpp"
module mpcache.text;
import mpcache.std;

namespace mpcache::text {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, DecodeOptions options, bool at_text_start)
    : tokenizer_(&tokenizer),
      options_(options),
      strip_pending_(at_text_start && tokenizer.strips_leading_space()) {}

std::string StreamingDecoder::push(TokenId id) {
  std::string bytes = tokenizer_->token_bytes(id);  // throws for an id out of range
  if (options_.skip_special && tokenizer_->is_special(id)) return {};
  if (bytes.empty()) return {};
  std::string_view view = bytes;
  if (strip_pending_) {
    strip_pending_ = false;
    if (view.starts_with(' ')) view.remove_prefix(1);
  }
  pending_.append(view);
  std::string out;
  const std::size_t used = detail::append_utf8_lossy(out, pending_, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamingDecoder::finish() {
  std::string out;
  detail::append_utf8_lossy(out, pending_, true);
  pending_.clear();
  return out;
}

}  // namespace mpcache::text
