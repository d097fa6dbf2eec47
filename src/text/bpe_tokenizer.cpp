module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include "byte_level.hpp"
module mpcache.text;
import mpcache.std;
import :bpe_tokenizer;

namespace mpcache::text::detail {

namespace {

// "<0xAB>" -> 0xAB
std::optional<unsigned char> byte_piece(std::string_view p) {
  if (p.size() != 6 || !p.starts_with("<0x") || p[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]);
  const int lo = hex(p[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::string name, BpeModel model, std::vector<Normalizer> normalizers,
                           std::vector<PreTokenizer> pre_tokenizers, DecodeSpec decode,
                           std::unordered_map<TokenId, std::string> odd_pieces)
    : Tokenizer(std::move(name), decode.strip_leading_space),
      model_(std::move(model)),
      normalizers_(std::move(normalizers)),
      pre_tokenizers_(std::move(pre_tokenizers)),
      decode_(std::move(decode)),
      odd_pieces_(std::move(odd_pieces)),
      byte_level_(model_.options().symbols == BpeModel::Symbols::bytes) {}

void BpeTokenizer::encode_ordinary(std::string_view text, bool at_start, std::vector<TokenId>& out) const {
  std::string segment(text);
  normalize(normalizers_, segment);
  std::vector<std::string> words;
  pre_tokenize(pre_tokenizers_, std::move(segment), at_start, words);
  for (const std::string& w : words) model_.encode_word(w, out);
}

void BpeTokenizer::append_model_token_bytes(TokenId id, std::string& out) const {
  const std::string& piece = model_.piece(id);
  if (piece.empty()) {
    if (const auto it = odd_pieces_.find(id); it != odd_pieces_.end()) out += it->second;
    return;
  }
  if (byte_level_) {
    out += piece;  // already raw bytes
    return;
  }
  if (decode_.byte_fallback)
    if (const auto b = byte_piece(piece)) {
      out.push_back(static_cast<char>(*b));
      return;
    }
  if (decode_.replace_from.empty()) {
    out += piece;
    return;
  }
  std::size_t i = 0;
  for (std::size_t j = piece.find(decode_.replace_from); j != std::string::npos;
       j = piece.find(decode_.replace_from, i)) {
    out.append(piece, i, j - i).append(decode_.replace_to);
    i = j + decode_.replace_from.size();
  }
  out.append(piece, i, std::string::npos);
}

std::optional<TokenId> BpeTokenizer::model_token_to_id(std::string_view piece) const {
  if (!byte_level_) return model_.find(piece);
  if (const auto bytes = byte_level_to_bytes(piece)) return model_.find(*bytes);
  for (const auto& [id, text] : odd_pieces_)
    if (text == piece) return id;
  return std::nullopt;
}

}  // namespace mpcache::text::detail
