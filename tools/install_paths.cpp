#include "install_paths.hpp"

namespace mpcache::tools {

std::filesystem::path executable_path(const char* argv0) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(argv0) : exe;
}

std::string default_model_dir(const std::filesystem::path& exe) {
  // MPCACHE_MODEL_FROM_BIN: the model folder relative to the installed
  // executable's folder (from CMake's install directories).
  const auto installed = exe.parent_path() / MPCACHE_MODEL_FROM_BIN;
  std::error_code ec;
  if (std::filesystem::exists(installed / "config.json", ec)) return installed.lexically_normal().string();
  return std::string(MPCACHE_SOURCE_DIR) + "/tools/model/austen-byte";
}

}  // namespace mpcache::tools
