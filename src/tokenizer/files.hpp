// Reading the files of a model folder (internal).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace mpcache::text::detail {

// The whole file; TokenizerError naming it if it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

// The parsed file; TokenizerError naming it (and where) if it is not JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace mpcache::text::detail
