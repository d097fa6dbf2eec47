// mpcache.text:files (internal): reading the files of a model folder, as
// text or JSON, and a BPE vocabulary and its merges from them.
// Implementation: files.cpp, vocab.cpp. nlohmann::json is in its interface:
// the units that import this partition include <nlohmann/json.hpp> too.
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
module mpcache.text:files;
import mpcache.std;
import :tokenizer;
import :bpe_model;

namespace mpcache::text::detail {

// The whole file; TokenizerError naming it if it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

// The parsed file; TokenizerError naming it (and where) if it is not JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

struct VocabPieces {
  std::vector<std::string> pieces;  // by id; raw bytes for byte-level vocabularies
  std::unordered_map<TokenId, std::string> odd;  // byte-level entries outside the alphabet
};

// `vocab`: {"token": id, ...}. `where` names it in errors (file and key).
VocabPieces read_vocab(const nlohmann::json& vocab, const std::string& where, bool byte_level);

// The vocabulary spelling of a merge side -> the model's key (raw bytes for
// byte-level). Throws naming `where` if it cannot be in the vocabulary.
std::string merge_side(std::string_view side, bool byte_level, const std::string& where);

// merges.txt: "#version" lines and blank lines skipped, every other line
// "left right" (exactly one space). Errors name the file and the line.
void read_merges_txt(std::string_view text, const std::string& file, BpeModel& model);

}  // namespace mpcache::text::detail
