// Where the `mpcache` executable finds its data: the installed package keeps
// the model under <prefix>/share/mpcache/model, next to bin/; the binary in
// the build tree falls back to the source tree.
#pragma once
#include <filesystem>
#include <string>

namespace mpcache::tools {

// This executable's path (/proc/self/exe), or argv[0] if that cannot be read.
std::filesystem::path executable_path(const char* argv0);

// The bundled model (config.json + model.safetensors) for the executable at
// `exe`: <exe's folder>/../share/mpcache/model/austen-byte if it is there,
// otherwise the source tree's tools/model/austen-byte.
std::string default_model_dir(const std::filesystem::path& exe);

}  // namespace mpcache::tools
