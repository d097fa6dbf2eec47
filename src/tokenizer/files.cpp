#include "files.hpp"

#include <fstream>
#include <iterator>
#include <system_error>

#include "tokenizer.hpp"

namespace mpcache::text::detail {

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw TokenizerError(path.string() + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path.string() + ": cannot be opened");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
