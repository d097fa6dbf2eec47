// mpcache.text:tokenizer: the Tokenizer, its loaders, and streaming decoding
// (see text.cppm for what is supported).
export module mpcache.text:tokenizer;
import mpcache.std;

export namespace mpcache::text {

using TokenId = std::uint32_t;

// Every failure of this component: malformed or unsupported tokenizer files
// (the message names the file and what is wrong, with a line number where the
// format has lines), ids out of range, input that is not UTF-8.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EncodeOptions {
  // Put bos() first (if the tokenizer has one). nullopt: as the tokenizer's
  // files say (adds_bos()), which is what Hugging Face's encode does by
  // default: LLaMA-style tokenizers add BOS, GPT-2's does not.
  std::optional<bool> add_bos{};
  // Text equal to an added token's content (e.g. "<|endoftext|>", "</s>")
  // becomes that token, as in Hugging Face. false: all text is ordinary text.
  bool split_special = true;
};

struct DecodeOptions {
  // Leave special tokens (BOS, EOS, ...) out of the text.
  bool skip_special = true;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Throws TokenizerError if `text` is not valid UTF-8 (except the byte
  // tokenizer, which takes any bytes).
  [[nodiscard]] std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Valid UTF-8 always: byte sequences that are not UTF-8 (possible with
  // arbitrary ids) become U+FFFD, one per maximal invalid subpart, as
  // TextDecoder and Rust's from_utf8_lossy do. Throws TokenizerError for an
  // id >= vocab_size().
  [[nodiscard]] std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  [[nodiscard]] std::optional<TokenId> bos() const { return bos_; }
  // The first end-of-sequence id; eos_ids() has all of them (a model may
  // stop on several, e.g. generation_config.json's "eos_token_id": [..]).
  [[nodiscard]] std::optional<TokenId> eos() const;
  [[nodiscard]] const std::vector<TokenId>& eos_ids() const { return eos_; }
  [[nodiscard]] bool is_eos(TokenId id) const;

  // All valid ids are < vocab_size() (model vocabulary and added tokens).
  [[nodiscard]] std::size_t vocab_size() const;
  // E.g. "bytes", "byte-level BPE (tokenizer.json)", "BPE with byte fallback (tokenizer.json)".
  [[nodiscard]] std::string name() const { return name_; }

  [[nodiscard]] bool is_special(TokenId id) const;
  // The id of a vocabulary entry (as written in the vocabulary file, e.g.
  // "Ġthe" or "▁the") or of an added token's content; nullopt if none.
  [[nodiscard]] std::optional<TokenId> token_to_id(std::string_view piece) const;
  // The bytes `id` contributes to decoded text (an added token: its content).
  // May be a partial UTF-8 character. Throws for an id out of range.
  [[nodiscard]] std::string token_bytes(TokenId id) const;
  // Decoding drops one space at the very start of the text (the LLaMA-2 "▁"
  // convention: encoding prepends one).
  [[nodiscard]] bool strips_leading_space() const { return strip_leading_space_; }
  // Whether encode() puts bos() first unless told otherwise (tokenizer.json's
  // post_processor, tokenizer_config.json's "add_bos_token").
  [[nodiscard]] bool adds_bos() const { return adds_bos_ && bos_.has_value(); }

  struct AddedToken {
    TokenId id = 0;
    std::string content;
    bool special = false;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
  };
  [[nodiscard]] const std::vector<AddedToken>& added_tokens() const { return added_; }

  // Used by the loaders; not needed by users.
  void set_bos(std::optional<TokenId> id) { bos_ = id; }
  void set_eos(std::vector<TokenId> ids) { eos_ = std::move(ids); }
  void set_adds_bos(bool adds) { adds_bos_ = adds; }
  void add_token(AddedToken token);

 protected:
  Tokenizer(std::string name, bool strip_leading_space)
      : name_(std::move(name)), strip_leading_space_(strip_leading_space) {}

  // Encode text that holds no added token. `at_start`: the segment begins the
  // input (some normalizers prepend "▁" only there).
  virtual void encode_ordinary(std::string_view text, bool at_start, std::vector<TokenId>& out) const = 0;
  // Bytes of a model-vocabulary token (id < model_vocab_size()).
  virtual void append_model_token_bytes(TokenId id, std::string& out) const = 0;
  [[nodiscard]] virtual std::size_t model_vocab_size() const = 0;
  [[nodiscard]] virtual std::optional<TokenId> model_token_to_id(std::string_view piece) const = 0;
  // Whether `text` must be valid UTF-8 to be encoded.
  [[nodiscard]] virtual bool needs_utf8() const { return true; }

 private:
  const AddedToken* find_added(TokenId id) const;

  std::string name_;
  bool strip_leading_space_ = false;
  bool adds_bos_ = false;
  std::optional<TokenId> bos_;
  std::vector<TokenId> eos_;
  std::vector<AddedToken> added_;  // in file order
  std::unordered_map<TokenId, std::size_t> added_by_id_;
  std::array<std::vector<std::size_t>, 256> added_by_first_byte_;
};

// Token id = byte value, vocabulary 256, no special tokens ("tokenizer: none").
[[nodiscard]] std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Reads a tokenizer from a model folder, in this order of preference:
//   mpcache.json saying {"tokenizer": "none"}: the byte tokenizer (a model
//     over bytes says so in its own folder; tokenizer files beside it are an
//     error);
//   tokenizer.json (model type "BPE"), or vocab.json + merges.txt (GPT-2),
//   or tokenizer.model (SentencePiece).
// BOS/EOS: tokenizer_config.json ("bos_token"/"eos_token"), else config.json
// and generation_config.json ("bos_token_id"/"eos_token_id"; numbers or lists).
// A folder with none of these: TokenizerError listing the files looked for.
[[nodiscard]] std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

// The single loaders, for callers that know what they have.
[[nodiscard]] std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& tokenizer_json);
[[nodiscard]] std::unique_ptr<Tokenizer> load_gpt2_vocab_merges(const std::filesystem::path& vocab_json,
                                                                const std::filesystem::path& merges_txt);
[[nodiscard]] std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& tokenizer_model);

// Incremental detokenization: push ids as they arrive, print what comes back.
// Never returns part of a UTF-8 character: incomplete trailing bytes are held
// until the next push (or finish(), which turns them into U+FFFD). The
// concatenation of all returned strings equals tokenizer.decode(all ids).
class StreamingDecoder {
 public:
  // `at_text_start`: the first pushed id begins the text, so a tokenizer that
  // strips_leading_space() drops it here too. Pass false when streaming the
  // continuation of a prompt that was not itself streamed.
  explicit StreamingDecoder(const Tokenizer& tokenizer, DecodeOptions options = {}, bool at_text_start = true);

  [[nodiscard]] std::string push(TokenId id);
  [[nodiscard]] std::string finish();
  // Bytes held back (0..3).
  [[nodiscard]] std::size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  bool strip_pending_;
  std::string pending_;
};

}  // namespace mpcache::text
