module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <system_error>
#include <nlohmann/json.hpp>
module mpcache.text;
import mpcache.std;
import :files;

namespace mpcache::text::detail {

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw TokenizerError(path.string() + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path.string() + ": cannot be opened");
  // Read in blocks: std::istreambuf_iterator's friend declarations clash
  // with mpcache.std's using-declarations in a module unit (clang 19).
  std::string text;
  std::array<char, 1 << 16> block;
  while (in.read(block.data(), block.size()) || in.gcount() > 0)
    text.append(block.data(), static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw TokenizerError(path.string() + ": read error");
  return text;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw TokenizerError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace mpcache::text::detail
