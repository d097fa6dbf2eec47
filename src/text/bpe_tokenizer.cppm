// mpcache.text:bpe_tokenizer (internal): a BPE tokenizer as Hugging Face's
// tokenizers library runs one: added tokens, normalizers, pre-tokenizers, the
// BPE model, a decoder. Implementation: bpe_tokenizer.cpp.
module mpcache.text:bpe_tokenizer;
import mpcache.std;
import :tokenizer;
import :bpe_model;
import :pipeline;

namespace mpcache::text::detail {

// How ids become bytes again (the decoder of tokenizer.json, reduced to
// what the supported decoders do).
struct DecodeSpec {
  std::string replace_from;  // e.g. "▁" ...
  std::string replace_to;    // ... -> " "
  bool byte_fallback = false;  // "<0xXX>" pieces are the byte 0xXX
  bool strip_leading_space = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // `odd_pieces`: byte-level vocabulary entries that are not in the byte
  // alphabet (no text encodes to them); they decode to their spelling.
  BpeTokenizer(std::string name, BpeModel model, std::vector<Normalizer> normalizers,
               std::vector<PreTokenizer> pre_tokenizers, DecodeSpec decode,
               std::unordered_map<TokenId, std::string> odd_pieces = {});

 protected:
  void encode_ordinary(std::string_view text, bool at_start, std::vector<TokenId>& out) const override;
  void append_model_token_bytes(TokenId id, std::string& out) const override;
  [[nodiscard]] std::size_t model_vocab_size() const override { return model_.size(); }
  [[nodiscard]] std::optional<TokenId> model_token_to_id(std::string_view piece) const override;

 private:
  BpeModel model_;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_tokenizers_;
  DecodeSpec decode_;
  std::unordered_map<TokenId, std::string> odd_pieces_;
  bool byte_level_;
};

}  // namespace mpcache::text::detail
