module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
#include "byte_level.hpp"
module mpcache.text;
import mpcache.std;
import :files;

namespace mpcache::text::detail {

namespace {
constexpr std::int64_t kMaxId = std::int64_t{1} << 24;  // a sanity bound: 16M tokens
}

VocabPieces read_vocab(const nlohmann::json& vocab, const std::string& where, bool byte_level) {
  if (!vocab.is_object()) throw TokenizerError(where + ": expected a JSON object {\"token\": id, ...}");
  VocabPieces out;
  std::vector<bool> taken;
  for (const auto& [piece, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0 || value.get<std::int64_t>() >= kMaxId)
      throw TokenizerError(where + ": the id of \"" + piece + "\" is not an integer in [0, 2^24): " + value.dump());
    const auto id = static_cast<std::size_t>(value.get<std::int64_t>());
    if (id >= out.pieces.size()) {
      out.pieces.resize(id + 1);
      taken.resize(id + 1, false);
    }
    if (taken[id]) throw TokenizerError(where + ": id " + std::to_string(id) + " is given to two tokens (one is \"" + piece + "\")");
    taken[id] = true;
    if (piece.empty()) throw TokenizerError(where + ": id " + std::to_string(id) + " has an empty token");
    if (!byte_level) {
      out.pieces[id] = piece;
    } else if (auto bytes = byte_level_to_bytes(piece)) {
      out.pieces[id] = std::move(*bytes);
    } else {
      out.odd.emplace(static_cast<TokenId>(id), piece);
    }
  }
  return out;
}

std::string merge_side(std::string_view side, bool byte_level, const std::string& where) {
  if (!byte_level) return std::string(side);
  if (auto bytes = byte_level_to_bytes(side)) return std::move(*bytes);
  throw TokenizerError(where + ": \"" + std::string(side) + "\" is not in the vocabulary (not byte-level text)");
}

void read_merges_txt(std::string_view text, const std::string& file, BpeModel& model) {
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    const std::string where = "line " + std::to_string(line_no);
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw TokenizerError(file + ": " + where + ": expected two tokens separated by one space, found \"" +
                           std::string(line) + "\"");
    const bool bytes = model.options().symbols == BpeModel::Symbols::bytes;
    model.add_merge(merge_side(line.substr(0, space), bytes, file + ": " + where),
                    merge_side(line.substr(space + 1), bytes, file + ": " + where), where);
  }
}

}  // namespace mpcache::text::detail
