// Reading a BPE vocabulary and its merges from JSON / text (internal).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpe_model.hpp"

namespace mpcache::text::detail {

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
