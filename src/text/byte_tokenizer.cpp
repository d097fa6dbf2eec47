// The byte identity tokenizer: token id = byte value (`tokenizer: none`).
module mpcache.text;
import mpcache.std;

namespace mpcache::text {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer() : Tokenizer("bytes", false) {}

 protected:
  void encode_ordinary(std::string_view text, bool, std::vector<TokenId>& out) const override {
    for (char c : text) out.push_back(static_cast<unsigned char>(c));
  }
  void append_model_token_bytes(TokenId id, std::string& out) const override {
    out.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  [[nodiscard]] std::size_t model_vocab_size() const override { return 256; }
  [[nodiscard]] std::optional<TokenId> model_token_to_id(std::string_view piece) const override {
    if (piece.size() != 1) return std::nullopt;
    return static_cast<unsigned char>(piece[0]);
  }
  [[nodiscard]] bool needs_utf8() const override { return false; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace mpcache::text
