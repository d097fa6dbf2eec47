module;
#include "prelude.hpp"
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include "json_reader.hpp"
module mpcache.model;
import mpcache.core;

namespace mpcache {

namespace {
// A checkpoint's tensors: which open file holds each name.
struct Checkpoint {
  std::string origin;  // the file or index, for messages
  std::vector<std::shared_ptr<SafeTensorsFile>> files;
  std::map<std::string, const SafeTensorsFile*> where;
};

Checkpoint single_file(const std::filesystem::path& path) {
  Checkpoint c;
  c.origin = path.string();
  c.files.push_back(std::make_shared<SafeTensorsFile>(SafeTensorsFile::open(path)));
  for (const auto& [name, entry] : c.files[0]->entries()) c.where.emplace(name, c.files[0].get());
  return c;
}

Checkpoint sharded(const std::filesystem::path& index) {
  auto fail = [&](ErrorCode code, const std::string& what) -> Error { return Error(code, index.string() + ": " + what); };
  std::ifstream in(index);
  if (!in) throw fail(ErrorCode::io, "cannot open (missing or unreadable)");
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, std::string> map;
  try {
    map = json_reader::parse_weight_map(text.str());
  } catch (const std::exception& e) {
    throw fail(ErrorCode::format, std::string("not a safetensors index: ") + e.what());
  }
  if (map.empty()) throw fail(ErrorCode::format, "\"weight_map\" lists no tensor");
  Checkpoint c;
  c.origin = index.string();
  std::map<std::string, std::shared_ptr<SafeTensorsFile>> shards;
  for (const auto& [name, file] : map) {
    if (shards.count(file)) continue;
    const std::filesystem::path shard(file);
    if (file.empty() || shard.has_parent_path() || shard.is_absolute() || file == "." || file == "..")
      throw fail(ErrorCode::format, "tensor '" + name + "': shard '" + file + "' is not a file name in the index's folder");
    const auto path = index.parent_path() / shard;
    if (!std::filesystem::exists(path))
      throw fail(ErrorCode::io, "shard '" + file + "' (of tensor '" + name + "') is missing");
    shards.emplace(file, std::make_shared<SafeTensorsFile>(SafeTensorsFile::open(path)));
  }
  for (const auto& [name, file] : map) {
    if (!shards.at(file)->contains(name))
      throw fail(ErrorCode::format, "tensor '" + name + "' is listed in shard '" + file + "', which does not hold it");
    c.where.emplace(name, shards.at(file).get());
  }
  // What the shards hold, the index must list there: a tensor stored in a
  // second shard (or in a shard the index does not put it in) is ambiguous.
  for (const auto& [file, shard] : shards)
    for (const auto& [name, entry] : shard->entries())
      if (const auto it = map.find(name); it == map.end())
        throw fail(ErrorCode::format, "shard '" + file + "' holds tensor '" + name + "', which the index does not list");
      else if (it->second != file)
        throw fail(ErrorCode::format, "tensor '" + name + "' is stored in two places: shard '" + file +
                                          "' and shard '" + it->second + "' (where the index lists it)");
  for (auto& [file, shard] : shards) c.files.push_back(shard);
  return c;
}

bool is_index(const std::filesystem::path& path) { return path.string().ends_with(".index.json"); }

// The file itself, its index, or (as transformers looks) model.safetensors
// first and model.safetensors.index.json where it is absent.
Checkpoint open_checkpoint(const std::filesystem::path& path) {
  if (is_index(path)) return sharded(path);
  const std::filesystem::path index = path.string() + ".index.json";
  if (!std::filesystem::exists(path) && std::filesystem::exists(index)) return sharded(index);
  if (!std::filesystem::exists(path))
    throw Error(ErrorCode::io, path.string() + ": cannot open (missing), and there is no sharded checkpoint " +
                                   index.filename().string() + " beside it");
  return single_file(path);
}
}  // namespace

WeightSource weights_from_file(const std::filesystem::path& path, UnusedTensors unused) {
  auto ck = std::make_shared<Checkpoint>(open_checkpoint(path));
  auto get = [ck](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
    const auto it = ck->where.find(name);
    if (it == ck->where.end()) throw Error(ErrorCode::format, ck->origin + ": missing tensor '" + name + "'");
    return it->second->load(name, shape);
  };
  auto holds = [ck](const std::string& name) { return ck->where.count(name) != 0; };
  auto rows = [ck](const std::string& name, const Shape& shape, std::size_t first,
                   std::size_t last) -> std::optional<RealTensor> {
    const auto it = ck->where.find(name);
    if (it == ck->where.end()) throw Error(ErrorCode::format, ck->origin + ": missing tensor '" + name + "'");
    return it->second->load_rows(name, shape, first, last);
  };
  auto finish = [ck, unused](const std::set<std::string>& requested) {
    if (unused == UnusedTensors::allow) return;
    std::vector<std::string> left;
    // Buffers that checkpoints carry but that are not weights (GPT-2's causal
    // mask, LLaMA's RoPE frequencies) are never asked for and never an error.
    auto buffer = [](const std::string& n) {
      return n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias") || n.ends_with("rotary_emb.inv_freq");
    };
    for (const auto& [name, file] : ck->where)
      if (!requested.count(name) && !buffer(name)) left.push_back(name);
    if (left.empty()) return;
    std::string names;
    for (std::size_t i = 0; i < left.size() && i < 4; ++i) names += (i ? ", '" : "'") + left[i] + "'";
    if (left.size() > 4) names += ", ...";
    throw Error(ErrorCode::format,
                ck->origin + ": " + std::to_string(left.size()) + " of " + std::to_string(ck->where.size()) +
                    " tensors are not used by the config (" + names +
                    "); config.json and the weights disagree (num_hidden_layers? biases?). Allow it explicitly "
                    "(UnusedTensors::allow, --allow-unused-weights) to run on a subset");
  };
  return WeightSource(std::move(get), std::move(finish), std::move(holds), std::move(rows));
}
WeightSource random_weights(std::uint64_t seed, double scale) {
  return [seed, scale](const std::string& name, const Shape& shape) -> std::optional<RealTensor> {
    std::uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
    for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
    RingTensor bits = ring_sample(shape, h);
    RealTensor out = RealTensor::from_shape(shape);
    const bool norm_name = name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos;
    const bool norm = norm_name && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    const double half_width = scale * std::sqrt(3.0);  // uniform with std `scale`
    auto b = bits.begin();
    for (auto& v : out) {
      const double u = static_cast<double>(*b++ >> 11) * 0x1p-53 * 2.0 - 1.0;
      v = norm ? 1.0 + 0.1 * u : half_width * u;
    }
    return out;
  };
}

WeightSource no_weights() {
  return [](const std::string&, const Shape&) -> std::optional<RealTensor> { return std::nullopt; };
}

}  // namespace mpcache
