// A SentencePiece model (tokenizer.model) through Debian's libsentencepiece:
// its own normaliser, dummy "▁" prefix and BPE or unigram segmentation, so
// that no protobuf reader of ours is needed. The pieces map to text as
// SentencePiece decodes them: "▁" is a space, <0xAB> byte pieces are bytes,
// control pieces (<s>, </s>) are nothing, <unk> is " ⁇ ".
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <sentencepiece_processor.h>  // private: no other unit, and no interface, sees it
module mpcache.text;
import mpcache.std;

namespace mpcache::text {

namespace {

constexpr std::string_view meta_space = "\xE2\x96\x81";  // U+2581, SentencePiece's space

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& file)
      : Tokenizer("SentencePiece (tokenizer.model)", /*strip_leading_space=*/true) {
    const auto status = sp_.Load(file.string());
    if (!status.ok()) throw TokenizerError(file.string() + ": not a SentencePiece model: " + status.ToString());
    pieces_ = static_cast<std::size_t>(sp_.GetPieceSize());
    // <s> and </s> (control pieces) stand for themselves in text, as Hugging
    // Face's LlamaTokenizer reads them; SentencePiece's own encode would not.
    for (int id = 0; id < sp_.GetPieceSize(); ++id)
      if (sp_.IsControl(id)) add_token({static_cast<TokenId>(id), sp_.IdToPiece(id), true, false, false, false});
    if (sp_.bos_id() >= 0) set_bos(static_cast<TokenId>(sp_.bos_id()));
    if (sp_.eos_id() >= 0) set_eos({static_cast<TokenId>(sp_.eos_id())});
    set_adds_bos(true);  // LlamaTokenizer's add_bos_token default
  }

 protected:
  void encode_ordinary(std::string_view text, bool, std::vector<TokenId>& out) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw TokenizerError("SentencePiece: cannot encode: " + status.ToString());
    for (int id : ids) out.push_back(static_cast<TokenId>(id));
  }
  void append_model_token_bytes(TokenId id, std::string& out) const override {
    const int i = static_cast<int>(id);
    if (sp_.IsControl(i) || sp_.IsUnused(i)) return;
    if (sp_.IsUnknown(i)) {
      out += " \xE2\x81\x87 ";  // SentencePiece's default surface of <unk>, " ⁇ "
      return;
    }
    const std::string& piece = sp_.IdToPiece(i);
    if (sp_.IsByte(i)) {  // "<0xAB>"
      out.push_back(static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
      return;
    }
    for (std::size_t at = 0; at < piece.size();) {
      if (piece.compare(at, meta_space.size(), meta_space) == 0) {
        out.push_back(' ');
        at += meta_space.size();
      } else {
        out.push_back(piece[at++]);
      }
    }
  }
  [[nodiscard]] std::size_t model_vocab_size() const override { return pieces_; }
  [[nodiscard]] std::optional<TokenId> model_token_to_id(std::string_view piece) const override {
    const int id = sp_.PieceToId(piece);
    if (id < 0 || (id == sp_.unk_id() && piece != sp_.IdToPiece(id))) return std::nullopt;
    return static_cast<TokenId>(id);
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
  std::size_t pieces_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& tokenizer_model) {
  return std::make_unique<SentencePieceTokenizer>(tokenizer_model);
}

}  // namespace mpcache::text
