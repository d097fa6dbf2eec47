#include "json_reader.hpp"

#include <set>
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
    else if (v.is_object()) s = Scalar{Scalar::Kind::object, false, 0, 0, v.dump()};
    else if (v.is_array()) s = Scalar{Scalar::Kind::array, false, 0, 0, v.dump()};
    out.emplace(key, std::move(s));
  }
  return out;
}

std::map<std::string, std::string> parse_weight_map(const std::string& text) {
  std::string member;  // the top-level key being parsed
  std::set<std::string> seen;
  std::string twice;
  auto note_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event != nlohmann::json::parse_event_t::key) return true;
    if (depth == 1) member = parsed.get<std::string>();
    else if (depth == 2 && member == "weight_map" && !seen.insert(parsed.get<std::string>()).second && twice.empty())
      twice = parsed.get<std::string>();
    return true;
  };
  const nlohmann::json j = nlohmann::json::parse(text, note_keys);
  if (!twice.empty()) throw std::runtime_error("tensor '" + twice + "' is listed twice in \"weight_map\"");
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw std::runtime_error("no \"weight_map\" object");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    if (!file.is_string()) throw std::runtime_error("tensor '" + name + "': the shard is not a file name");
    out.emplace(name, file.get<std::string>());
  }
  return out;
}

}  // namespace mpcache::json_reader
