// What all tokenizers share: added (special) tokens, BOS/EOS, decoding.
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include "utf8.hpp"
module mpcache.text;
import mpcache.std;

namespace mpcache::text {

namespace {

bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool ascii_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

}  // namespace

void Tokenizer::add_token(AddedToken token) {
  if (token.content.empty())
    throw TokenizerError("added token " + std::to_string(token.id) + " has empty content");
  if (added_by_id_.contains(token.id))
    throw TokenizerError("added token " + std::to_string(token.id) + " (\"" + token.content + "\") is listed twice");
  const auto first = static_cast<unsigned char>(token.content.front());
  added_by_id_.emplace(token.id, added_.size());
  added_by_first_byte_[first].push_back(added_.size());
  added_.push_back(std::move(token));
}

const Tokenizer::AddedToken* Tokenizer::find_added(TokenId id) const {
  const auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_[it->second];
}

std::optional<TokenId> Tokenizer::eos() const {
  if (eos_.empty()) return std::nullopt;
  return eos_.front();
}

bool Tokenizer::is_eos(TokenId id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

std::size_t Tokenizer::vocab_size() const {
  std::size_t n = model_vocab_size();
  for (const AddedToken& t : added_) n = std::max<std::size_t>(n, std::size_t{t.id} + 1);
  return n;
}

bool Tokenizer::is_special(TokenId id) const {
  const AddedToken* t = find_added(id);
  return t != nullptr && t->special;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view piece) const {
  if (const auto id = model_token_to_id(piece)) return id;
  for (const AddedToken& t : added_)
    if (t.content == piece) return t.id;
  return std::nullopt;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  if (id >= vocab_size())
    throw TokenizerError(name_ + ": token id " + std::to_string(id) + " is out of range (vocabulary size " +
                         std::to_string(vocab_size()) + ")");
  if (const AddedToken* t = find_added(id)) return t->content;
  std::string out;
  if (id < model_vocab_size()) append_model_token_bytes(id, out);
  return out;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  if (needs_utf8()) {
    const std::size_t bad = detail::first_invalid_utf8(text);
    if (bad != std::string_view::npos)
      throw TokenizerError(name_ + ": cannot encode text that is not valid UTF-8 (at byte offset " +
                           std::to_string(bad) + ")");
  }
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos.value_or(adds_bos_) && bos_) out.push_back(*bos_);
  if (!options.split_special || added_.empty()) {
    encode_ordinary(text, true, out);
    return out;
  }
  // Added tokens first, leftmost-longest; the text between them goes to the
  // model (as Hugging Face's AddedVocabulary does).
  std::size_t segment = 0;
  std::size_t p = 0;
  while (p < text.size()) {
    const AddedToken* best = nullptr;
    for (std::size_t k : added_by_first_byte_[static_cast<unsigned char>(text[p])]) {
      const AddedToken& t = added_[k];
      if (!text.substr(p).starts_with(t.content)) continue;
      if (best != nullptr && best->content.size() >= t.content.size()) continue;
      if (t.single_word) {
        const std::size_t e = p + t.content.size();
        if ((p > 0 && ascii_word_char(text[p - 1])) || (e < text.size() && ascii_word_char(text[e]))) continue;
      }
      best = &t;
    }
    if (best == nullptr) {
      ++p;
      continue;
    }
    std::size_t start = p;
    std::size_t end = p + best->content.size();
    if (best->lstrip)
      while (start > segment && ascii_space(text[start - 1])) --start;
    if (best->rstrip)
      while (end < text.size() && ascii_space(text[end])) ++end;
    if (start > segment) encode_ordinary(text.substr(segment, start - segment), segment == 0, out);
    out.push_back(best->id);
    segment = p = end;
  }
  if (segment < text.size()) encode_ordinary(text.substr(segment), segment == 0, out);
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (TokenId id : ids) {
    if (options.skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string_view view = bytes;
  if (strip_leading_space_ && view.starts_with(' ')) view.remove_prefix(1);
  std::string out;
  out.reserve(view.size());
  detail::append_utf8_lossy(out, view, true);
  return out;
}

}  // namespace mpcache::text
