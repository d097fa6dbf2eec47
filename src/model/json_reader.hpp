// JSON parsing for the model loader: a thin adapter over nlohmann-json,
// compiled in an ordinary (non-module) translation unit, so that module units
// see only this small std-only interface and no second textual copy of the
// standard headers (they import mpcache.std). Errors are std::runtime_error
// with a message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mpcache::json_reader {

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<std::uint64_t> offsets;
};

// The tensors of a safetensors header (the __metadata__ entry is skipped).
std::vector<RawTensor> parse_safetensors_header(const std::string& text);

struct Scalar {
  enum class Kind { null, boolean, integer, number, string, object, array, other } kind = Kind::other;
  bool boolean = false;
  long long integer = 0;
  double number = 0;
  std::string text;  // a string's value; an object's or array's JSON text (parse it again to look inside)
};

// Top-level members of a JSON object.
std::map<std::string, Scalar> parse_flat_object(const std::string& text);

// A sharded checkpoint's index (model.safetensors.index.json): its
// "weight_map", tensor name -> shard file name. A name listed twice in the
// map is an error naming it (JSON parsers keep only the last).
std::map<std::string, std::string> parse_weight_map(const std::string& text);

}  // namespace mpcache::json_reader
