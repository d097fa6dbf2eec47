#include "json_reader.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace mpcache::json_reader {

std::vector<RawTensor> parse_safetensors_header(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  if (!j.is_object()) throw std::runtime_error("header is not a JSON object");
  std::vector<RawTensor> out;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") continue;
    try {
      out.push_back(RawTensor{name, v.at("dtype").get<std::string>(),
                              v.at("shape").get<std::vector<std::size_t>>(),
                              v.at("data_offsets").get<std::vector<std::uint64_t>>()});
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("tensor '" + name + "': " + e.what());
    }
  }
  return out;
}

std::map<std::string, Scalar> parse_flat_object(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  std::map<std::string, Scalar> out;
  for (const auto& [key, v] : j.items()) {
    Scalar s;
    if (v.is_null()) s.kind = Scalar::Kind::null;
    else if (v.is_boolean()) s = Scalar{Scalar::Kind::boolean, v.get<bool>(), 0, 0, {}};
    else if (v.is_number_integer()) s = Scalar{Scalar::Kind::integer, false, v.get<long long>(), v.get<double>(), {}};
    else if (v.is_number()) s = Scalar{Scalar::Kind::number, false, 0, v.get<double>(), {}};
    else if (v.is_string()) s = Scalar{Scalar::Kind::string, false, 0, 0, v.get<std::string>()};
    out.emplace(key, std::move(s));
  }
  return out;
}

}  // namespace mpcache::json_reader
