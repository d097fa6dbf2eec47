// mpcache.text:bpe_model (internal): the BPE model, a vocabulary, ranked
// merges, and the merge loop. Implementation: bpe_model.cpp.
module mpcache.text:bpe_model;
import mpcache.std;
import :tokenizer;

namespace mpcache::text::detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  enum class Symbols {
    bytes,       // byte-level BPE: a word starts as its bytes (vocabulary keys are raw bytes)
    characters,  // a word starts as its characters (vocabulary keys are UTF-8 text)
  };
  struct Options {
    Symbols symbols = Symbols::characters;
    bool byte_fallback = false;  // characters not in the vocabulary become <0xXX> tokens
    std::optional<TokenId> unk;  // else characters not in the vocabulary are an error
    bool fuse_unk = false;       // consecutive unknown characters give one unk token
    bool ignore_merges = false;  // a word that is in the vocabulary is one token
  };

  // `pieces[id]`: the vocabulary key of id (ids are 0..pieces.size()-1; holes
  // are empty strings that no text can produce). `source` names the file in
  // errors.
  BpeModel(std::vector<std::string> pieces, Options options, std::string source);

  // Adds the merge (left, right) with the next rank; later duplicates of a
  // pair take the later rank, as in Hugging Face and the reference encoders.
  // Throws if either side or their concatenation is not in the vocabulary
  // (`where` says where the merge was read, e.g. "merges.txt line 7").
  void add_merge(std::string_view left, std::string_view right, std::string_view where);

  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

  [[nodiscard]] std::size_t size() const { return pieces_.size(); }
  [[nodiscard]] const std::string& piece(TokenId id) const { return pieces_[id]; }
  [[nodiscard]] std::optional<TokenId> find(std::string_view piece) const;
  [[nodiscard]] std::size_t merge_count() const { return merges_.size(); }
  [[nodiscard]] const Options& options() const { return options_; }

 private:
  struct Merge {
    std::uint32_t rank;
    TokenId id;
  };
  static std::uint64_t key(TokenId a, TokenId b) { return (std::uint64_t{a} << 32) | b; }
  const Merge* find_merge(TokenId a, TokenId b) const;
  void initial_symbols(std::string_view word, std::vector<TokenId>& ids) const;

  std::vector<std::string> pieces_;
  StringIdMap vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::uint32_t next_rank_ = 0;
  Options options_;
  std::string source_;
  std::vector<std::optional<TokenId>> byte_ids_;  // per byte: its single-byte or <0xXX> token
};

}  // namespace mpcache::text::detail
