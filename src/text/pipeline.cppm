// mpcache.text:pipeline (internal): the steps before the BPE model,
// normalizers and pre-tokenizers, as described by a tokenizer.json, applied
// to text that holds no added token. Implementation: normalize.cpp,
// pre_tokenize.cpp.
module mpcache.text:pipeline;
import mpcache.std;
import :unicode;

namespace mpcache::text::detail {

struct Normalizer {
  enum class Kind {
    prepend,  // put `text` in front of a non-empty segment (LLaMA-2: "▁")
    replace,  // replace every `from` by `text` (LLaMA-2: " " -> "▁")
    nfc,      // Unicode canonical composition
  };
  Kind kind = Kind::prepend;
  std::string from;
  std::string text;
};

enum class PrependScheme { always, first, never };

struct PreTokenizer {
  enum class Kind {
    split,       // isolate the matches of one of the known regexes
    byte_level,  // (optional leading space and) GPT-2 regex split; bytes become the model's symbols
    metaspace,   // ' ' -> "▁", prepend "▁", optionally split before each "▁"
    digits,      // isolate ASCII digits (each one, or runs)
  };
  Kind kind = Kind::split;
  SplitPattern pattern = SplitPattern::gpt2;
  bool add_prefix_space = false;
  bool use_regex = true;
  std::string replacement = "\xE2\x96\x81";  // U+2581 "▁"
  PrependScheme prepend = PrependScheme::always;
  bool split = true;
  bool individual_digits = false;
};

// Applies the normalizers in order to one segment of text.
void normalize(const std::vector<Normalizer>& normalizers, std::string& text);

// Splits one normalized segment into the words the model encodes one by one.
// `at_start`: the segment begins the input (PrependScheme::first).
void pre_tokenize(const std::vector<PreTokenizer>& steps, std::string text, bool at_start,
                  std::vector<std::string>& words);

}  // namespace mpcache::text::detail
